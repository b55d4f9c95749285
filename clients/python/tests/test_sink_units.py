"""The sink SDK's rules that need no running keycap: the key source's refetch cooldown and
rotation, the JWKS checks, the HTTP carrier options, single use under a race, names."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from keycap_client.sink import (
    AdmissionContext,
    InMemorySpentStore,
    JwksError,
    KernelJwksSource,
    Sink,
    SinkMiddleware,
    SinkRefusal,
    StaticJwksSource,
    VerifierOptions,
    capability_from_scope,
    current_capability,
    sink_service,
)
from sink_support import VECTORS

VECTOR = {v["name"]: v for v in VECTORS["vectors"]}
CLOCK = VerifierOptions(clock=lambda: float(VECTOR["accepts-idempotent"]["clock"]))
KERNEL_JWKS = json.dumps(VECTOR["accepts-idempotent"]["jwks"])
KERNEL_KID = VECTORS["keys"]["kernel-current"]["kid"]
RETIRED_KID = VECTORS["keys"]["kernel-retired"]["kid"]


def public_jwks(*names: str) -> str:
    return json.dumps({"keys": [{k: v for k, v in VECTORS["keys"][n].items() if k != "d"} for n in names]})


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0
        self.slept = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept += s
        self.t += s


def test_unknown_kids_cost_at_most_one_kernel_fetch_per_cooldown() -> None:
    clock = FakeClock()
    fetched: list[float] = []

    def fetch() -> str:
        fetched.append(clock.t)
        return KERNEL_JWKS

    source = KernelJwksSource(fetch, refetch_cooldown=1.0, clock=clock.now, sleep=clock.sleep)
    assert source.get_key(KERNEL_KID) is not None
    for i in range(5):
        assert source.get_key(f"made-up-{i}") is None
    assert source.get_key(KERNEL_KID) is not None  # cached: no fetch
    assert len(fetched) == 6
    assert all(b - a >= 1.0 for a, b in zip(fetched, fetched[1:]))


def test_concurrent_lookups_of_an_unknown_kid_share_one_fetch() -> None:
    calls = 0

    def fetch() -> str:
        nonlocal calls
        calls += 1
        time.sleep(0.2)
        return KERNEL_JWKS

    source = KernelJwksSource(fetch, refetch_cooldown=5.0)
    results: list[object] = []
    threads = [threading.Thread(target=lambda: results.append(source.get_key("made-up"))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [None] * 8 and calls == 1


def test_a_rotated_in_key_is_learned_and_a_failed_fetch_keeps_the_known_keys() -> None:
    answers: list[str | Exception] = [public_jwks("kernel-current"), public_jwks("kernel-current", "kernel-retired"), ConnectionError("kernel down")]

    def fetch() -> str:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    source = KernelJwksSource(fetch, refetch_cooldown=0)
    assert source.get_key(KERNEL_KID) is not None and source.cached_key(RETIRED_KID) is None
    assert source.get_key(RETIRED_KID) is not None  # unknown kid: refetched, learned
    with pytest.raises(SinkRefusal) as caught:
        source.get_key("made-up")  # this fetch fails: cannot tell forged from rotated
    assert (caught.value.reason, caught.value.retryable) == ("SIGNING_KEYS_UNAVAILABLE", True)
    assert "kernel down" in caught.value.message
    assert source.get_key(KERNEL_KID) is not None


def test_a_jwks_with_private_material_is_refused_without_quoting_it(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    private = VECTORS["keys"]["kernel-current"]
    path.write_text(json.dumps({"keys": [private]}))
    with pytest.raises(JwksError) as caught:
        StaticJwksSource.from_file(path)
    assert "private key material" in str(caught.value) and private["d"] not in str(caught.value)
    with pytest.raises(JwksError):
        StaticJwksSource.from_text(public_jwks("kernel-encryption"))
    with pytest.raises(JwksError, match="cannot be read"):
        StaticJwksSource.from_file(tmp_path / "absent.json")
    assert StaticJwksSource.from_text(public_jwks("kernel-current")).get_key(KERNEL_KID) is not None


def http_scope(headers: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": "/charges",
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
        "client": ("10.0.0.7", 41000),
    }


def call_asgi(app: Any, scope: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(m: dict[str, Any]) -> None:
        sent.append(m)

    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], {k.decode(): v.decode() for k, v in sent[0]["headers"]}, sent[1]["body"]


async def key_app(scope: Any, receive: Any, send: Any) -> None:
    assert current_capability() == capability_from_scope(scope)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": (capability_from_scope(scope).key or "").encode()})


def vector_sink(**kw: Any) -> Sink:
    return Sink("unit", tools=["payments.charge", "payments.transfer"], keys=StaticJwksSource.from_text(KERNEL_JWKS), verifier=CLOCK, **kw)


def test_a_custom_capability_header_takes_the_bare_token_or_bearer_and_leaves_authorization_alone() -> None:
    token = VECTOR["accepts-idempotent"]["token"]
    key = VECTOR["accepts-idempotent"]["expect"]["verified"]["key"]
    app = SinkMiddleware(key_app, vector_sink(), header="Keycap-Capability")
    assert call_asgi(app, http_scope({"keycap-capability": token, "authorization": "Basic dXNlcjpwYXNz"}))[::2] == (200, key.encode())
    assert call_asgi(app, http_scope({"keycap-capability": f"Bearer {token}"}))[0] == 200
    status, headers, body = call_asgi(app, http_scope({"authorization": f"Bearer {token}"}))
    assert (status, headers["content-type"], json.loads(body)["reason"]) == (401, "application/problem+json", "CAPABILITY_MISSING")


def test_a_racing_second_presentation_of_an_unsafe_capability_is_refused() -> None:
    sink = vector_sink(spent_store=InMemorySpentStore())
    token = VECTOR["accepts-unsafe"]["token"]
    outcomes: list[str] = []
    barrier = threading.Barrier(16)

    def present() -> None:
        barrier.wait()
        try:
            sink.admit(f"Bearer {token}", AdmissionContext("/x.Y/Z", "10.0.0.7:1"))
            outcomes.append("admitted")
        except SinkRefusal as err:
            outcomes.append(err.reason)

    threads = [threading.Thread(target=present) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["CAPABILITY_REUSED"] * 15 + ["admitted"]


def test_the_refusal_hook_sees_every_refusal_and_its_failure_changes_nothing() -> None:
    events: list[Any] = []

    def hook(e: Any) -> None:
        events.append(e)
        raise RuntimeError("the user's hook is broken")

    sink = vector_sink(on_refusal=hook)
    with pytest.raises(SinkRefusal) as caught:
        sink.admit(f"Bearer {VECTOR['accepts-idempotent']['token']}", AdmissionContext("HTTP POST /x", "10.0.0.7:1", "other-key"))
    assert caught.value.reason == "KEY_MISMATCH"
    assert [(e.sink, e.error.reason, e.tool_id, e.tool_id_verified) for e in events] == [("unit", "KEY_MISMATCH", "payments.charge", True)]


def test_sink_names_and_tools_are_checked_at_construction() -> None:
    assert sink_service("payments.v2") == "sink:payments.v2"
    for bad in ("", "Payments", "-x", "a" * 64, "pay ments"):
        with pytest.raises(ValueError):
            sink_service(bad)
    with pytest.raises(ValueError, match="tools"):
        Sink("unit", tools=[], keys=StaticJwksSource.from_text(KERNEL_JWKS))


def test_grpc_streaming_handlers_are_guarded_and_later_calls_on_the_thread_see_no_capability() -> None:
    from concurrent import futures

    import grpc

    from keycap_client import KeycapError
    from keycap_client.sink import SinkInterceptor, capability_of

    token = VECTOR["accepts-idempotent"]["token"]
    open_calls: list[str] = []

    def stream(request: bytes, context: grpc.ServicerContext) -> Any:
        cap = capability_of(context)
        for i in range(3):
            yield f"{cap.tool_id}:{i}".encode()

    def health(request: bytes, context: grpc.ServicerContext) -> bytes:
        try:
            current_capability()
            open_calls.append("saw a capability")
        except LookupError:
            open_calls.append("none")
        return b"ok"

    sink = vector_sink()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1), interceptors=[SinkInterceptor(sink, guard=lambda m: not m.endswith("/Health"))])
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "test.sink.v1.Effects",
                {"Stream": grpc.unary_stream_rpc_method_handler(stream), "Health": grpc.unary_unary_rpc_method_handler(health)},
            ),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            call: Any = channel.unary_stream("/test.sink.v1.Effects/Stream")
            assert list(call(b"", metadata=(("authorization", f"Bearer {token}"),), timeout=10)) == [b"payments.charge:0", b"payments.charge:1", b"payments.charge:2"]
            with pytest.raises(grpc.RpcError) as caught:
                list(call(b"", metadata=(("authorization", "Bearer x.y.z"),), timeout=10))
            assert KeycapError.from_rpc_error(caught.value).reason == "CAPABILITY_MALFORMED"
            health_call: Any = channel.unary_unary("/test.sink.v1.Effects/Health")
            assert health_call(b"", timeout=10) == b"ok"
            assert open_calls == ["none"]
    finally:
        server.stop(None)


def test_grpc_two_authorization_values_are_refused_as_the_ledger_does_even_with_a_genuine_one_first() -> None:
    from concurrent import futures

    import grpc

    from keycap_client import KeycapError
    from keycap_client.sink import SinkInterceptor

    token = VECTOR["accepts-idempotent"]["token"]
    ran: list[bytes] = []

    def charge(request: bytes, context: grpc.ServicerContext) -> bytes:
        ran.append(request)
        return b"charged"

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1), interceptors=[SinkInterceptor(vector_sink())])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.sink.v1.Effects", {"Charge": grpc.unary_unary_rpc_method_handler(charge)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            call: Any = channel.unary_unary("/test.sink.v1.Effects/Charge")
            assert call(b"one", metadata=(("authorization", f"Bearer {token}"),), timeout=10) == b"charged"
            with pytest.raises(grpc.RpcError) as caught:
                call(b"two", metadata=(("authorization", f"Bearer {token}"), ("authorization", "Bearer other")), timeout=10)
            assert KeycapError.from_rpc_error(caught.value).reason == "CAPABILITY_MALFORMED"
            assert ran == [b"one"]
    finally:
        server.stop(None)


def test_the_bench_prints_one_json_line_with_both_rates() -> None:
    import subprocess
    import sys

    from conftest import REPO_ROOT

    out = subprocess.run(
        [sys.executable, str(REPO_ROOT / "clients/python/bench/sink_bench.py"), "0.5"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout.strip().splitlines()
    assert len(out) == 1
    line = json.loads(out[0])
    assert line["language"] == "python" and line["requests"] > 0
    assert 0 < line["protected_per_s"] < line["unprotected_per_s"] and line["verify_us_per_request"] > 0
    assert 0 < line["ratio"] < 1 and 0 < line["http_ratio"] <= 1.5
    assert line["how"] and line["http_how"]


class _FakeMarks:
    """A listing_marks collection that records insert_many calls and answers as told."""

    def __init__(self) -> None:
        self.inserted: list[list[str]] = []
        self.fail_with: Exception | None = None

    def insert_many(self, docs: list[dict[str, Any]], ordered: bool = True) -> Any:
        assert ordered is False
        self.inserted.append([d["_id"] for d in docs])
        if self.fail_with is not None:
            raise self.fail_with

        class Acknowledged:
            acknowledged = True

        return Acknowledged()


def test_listing_marks_are_inserted_once_per_process_duplicates_are_success_and_the_memo_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from datetime import datetime, timezone

    from pymongo.errors import BulkWriteError

    from keycap_client.sink import refusal_recorder
    from keycap_client.sink.time_buckets import scopes_of

    fake = _FakeMarks()
    marks = refusal_recorder._ListingMarks(fake, "rejections")  # type: ignore[arg-type]
    at = datetime(2026, 12, 6, 11, 59, 13, 250000, tzinfo=timezone.utc)
    scopes = scopes_of({"tool": "t", "reason": "KEY_MISMATCH", "service": "sink:s"})
    marks.ensure(at, scopes)
    assert len(fake.inserted) == 1 and len(fake.inserted[0]) == 16
    marks.ensure(at.replace(microsecond=900000), scopes)  # the same second: nothing to insert
    assert len(fake.inserted) == 1
    marks.ensure(at.replace(second=14), scopes)  # the next second: only its 4 second marks
    assert fake.inserted[1] == [
        "rejections/all/s/20261206115914/",
        "rejections/tool/s/20261206115914/t",
        "rejections/reason/s/20261206115914/KEY_MISMATCH",
        "rejections/service/s/20261206115914/sink:s",
    ]

    # Written by another process already: every write error a duplicate key is success.
    fake.fail_with = BulkWriteError({"writeErrors": [{"index": i, "code": 11000} for i in range(4)], "writeConcernErrors": []})
    marks.ensure(at.replace(second=15), scopes)
    marks.ensure(at.replace(second=15), scopes)
    assert len(fake.inserted) == 3  # memoised after the duplicates

    # Any other failure raises (the record is then not written) and nothing is memoised.
    for details in (
        {"writeErrors": [{"index": 0, "code": 11000}, {"index": 1, "code": 2}], "writeConcernErrors": []},
        {"writeErrors": [], "writeConcernErrors": [{"code": 64}]},
    ):
        fake.fail_with = BulkWriteError(details)
        with pytest.raises(BulkWriteError):
            marks.ensure(at.replace(second=16), scopes)
    fake.fail_with = RuntimeError("connection lost")
    with pytest.raises(RuntimeError):
        marks.ensure(at.replace(second=16), scopes)
    fake.fail_with = None
    marks.ensure(at.replace(second=16), scopes)
    assert len(fake.inserted) == 7 and fake.inserted[-1] == fake.inserted[-2]

    # Past the bound the memo starts over: what was known is inserted again (duplicates, harmless).
    monkeypatch.setattr(refusal_recorder, "_MARK_MEMO_LIMIT", 30)
    marks.ensure(at.replace(second=17), scopes)  # 28 known: 4 more pass 30, the memo keeps only these 4
    assert len(fake.inserted[-1]) == 4
    marks.ensure(at, scopes)
    assert len(fake.inserted) == 9 and len(fake.inserted[-1]) == 16
