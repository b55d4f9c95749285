"""The Python sink SDK end to end: genuine capabilities from the real kernel, an ASGI app
under uvicorn and a gRPC server behind the interceptors, refusals read back through
`keycap rejections`. Each forgery is also presented to the ledger, where it can judge it,
and must be refused there for the same reason."""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

import grpc
import grpc.aio
import pymongo
import pytest
from pymongo.database import Database

from conftest import Stack
from keycap_client import (
    ERROR_DOMAIN,
    Idempotent,
    KernelClient,
    KeyDerivation,
    KeycapError,
    LedgerClient,
    Replay,
    Shadow,
    ToolDefinition,
    Unsafe,
)
from keycap_client.sink import (
    AsyncSinkInterceptor,
    InMemorySpentStore,
    KernelJwksSource,
    MongoRefusalRecorder,
    MongoSpentStore,
    RejectionInput,
    Sink,
    SinkInterceptor,
    SinkMiddleware,
    VerifierOptions,
    capability_from_scope,
    capability_of,
)
from keycap_client.sink.time_buckets import marks_for, scopes_of
from sink_support import (
    alg_none,
    cli_rejections,
    cli_stats,
    hs256,
    http_request,
    serve_asgi,
    signed_by_attacker,
    tampered,
    unb64url,
)

METHOD = "/test.sink.v1.Effects/Do"


@pytest.fixture(scope="module")
def db(stack: Stack) -> Iterator[Database[Any]]:
    client: pymongo.MongoClient[Any] = pymongo.MongoClient(stack.mongodb_uri, serverSelectionTimeoutMS=5000)
    yield client[stack.mongodb_database]
    client.close()


@pytest.fixture(scope="module")
def keys(stack: Stack) -> Iterator[KernelJwksSource]:
    source = KernelJwksSource.from_kernel(stack.kernel)
    yield source
    source.close()


@pytest.fixture
def tools(kernel: KernelClient) -> tuple[str, str]:
    """A fresh idempotent tool (key from /order_id) and a fresh unsafe one."""
    suffix = uuid.uuid4().hex[:10]
    charge, notify = f"py.sink.charge.{suffix}", f"py.sink.notify.{suffix}"
    kernel.register_tool(ToolDefinition(charge, Idempotent(KeyDerivation(["/order_id"]))))
    kernel.register_tool(ToolDefinition(notify, Unsafe()))
    return charge, notify


@pytest.fixture
def sink_name() -> str:
    return f"py-e2e-{uuid.uuid4().hex[:10]}"


def begin(kernel: KernelClient, tool_id: str, order: str = "o-1") -> tuple[str, str]:
    """A genuine capability and its key ("" for unsafe)."""
    res = kernel.begin_call(tool_id, json.dumps({"order_id": order, "amount_cents": 500}))
    return res.capability, res.call.key


async def effect_app(scope: Any, receive: Any, send: Any) -> None:
    """What a sink's own handler sees: only the verified claims."""
    cap = capability_from_scope(scope)
    body = json.dumps({"tool_id": cap.tool_id, "key": cap.key, "effect": cap.effect, "call_id": cap.call_id, "jti": cap.jti}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


def post(base: str, token: str | None, idempotency_key: str | None = None) -> Any:
    headers = {"content-type": "application/json"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    if idempotency_key is not None:
        headers["idempotency-key"] = idempotency_key
    return http_request(base, "POST", "/effects", headers, b"{}")


def expected_mark_ids(lb: str, scopes: list[tuple[str, str]]) -> list[str]:
    """The listing_marks ids of a record in bucket ``lb`` (ADR 0033), spelled out: per scope,
    its day, hour, minute and second."""
    return [f"rejections/{scope}/{level}/{lb[:n]}/{value}" for scope, value in scopes for level, n in (("d", 8), ("h", 10), ("m", 12), ("s", 14))]


def assert_listed(db: Database[Any], doc: dict[str, Any] | None, filters: dict[str, str]) -> None:
    """``doc`` (a rejections record) carries the second of its rejected_at as lb, and the marks
    of every listing it is in (all, then ``filters``) are stored, in the services' format."""
    assert doc is not None
    at: datetime = doc["rejected_at"].replace(tzinfo=timezone.utc)
    assert doc["lb"] == at.strftime("%Y%m%d%H%M%S")
    ids = expected_mark_ids(doc["lb"], [("all", ""), *filters.items()])
    stored = {m["_id"]: m for m in db["listing_marks"].find({"_id": {"$in": ids}})}
    assert sorted(stored) == sorted(ids)
    want = marks_for("rejections", at, scopes_of(filters))
    assert [m["_id"] for m in want] == ids
    for m in want:
        assert {**stored[m["_id"]], "at": stored[m["_id"]]["at"].replace(tzinfo=timezone.utc)} == m


def ledger_reason(ledger: LedgerClient, token: str, key: str = "") -> str:
    with pytest.raises(KeycapError) as caught:
        ledger.write_with_capability(token, key=key, payload=b'{"charged":500}', retry=False)
    return caught.value.reason


def test_http_sink_admits_a_genuine_capability_and_refuses_forgeries_as_the_ledger_does(
    stack: Stack, kernel: KernelClient, ledger: LedgerClient, db: Database[Any], keys: KernelJwksSource, tools: tuple[str, str], sink_name: str
) -> None:
    charge, notify = tools
    recorder = MongoRefusalRecorder(db, service=f"sink:{sink_name}")
    sink = Sink(sink_name, tools=[charge, notify], keys=keys, spent_store=MongoSpentStore(db, sweep_interval=0), refusals=recorder)
    token, key = begin(kernel, charge)
    unsafe_token, _ = begin(kernel, notify)
    forgeries = {
        "tampered payload": (tampered(token, tool_id=notify), "BAD_SIGNATURE"),
        "alg none": (alg_none(token), "ALGORITHM_NOT_ALLOWED"),
        "HS256 keyed with the public key": (hs256(token, unb64url(json.loads(kernel.raw.GetSigningKeys(_signing_keys_request()).jwks_json)["keys"][0]["x"])), "ALGORITHM_NOT_ALLOWED"),
        "unknown kid, another key": (signed_by_attacker(token), "UNKNOWN_KEY_ID"),
    }
    with serve_asgi(SinkMiddleware(effect_app, sink)) as base:
        ok = post(base, token, idempotency_key=key)
        assert ok.status == 200, ok.body
        assert ok.json() == {"tool_id": charge, "key": key, "effect": "idempotent", "call_id": ok.json()["call_id"], "jti": ok.json()["jti"]}
        # Idempotent: the same capability again is the same effect, admitted (the key dedups).
        assert post(base, token).status == 200

        fetches = keys.fetch_count
        for what, (forged, reason) in forgeries.items():
            res = post(base, forged)
            assert (res.status, res.json()["reason"]) == (401, reason), what
            assert res.headers["content-type"] == "application/problem+json"
            assert res.json() == {
                "type": f"https://keycap.dev/reasons/{reason}",
                "title": reason,
                "status": 401,
                "detail": res.json()["detail"],
                "reason": reason,
                "retryable": False,
            }
            assert forged not in res.body.decode()
            assert ledger_reason(ledger, forged, key) == reason, what
        assert keys.fetch_count <= fetches + 1, "an unknown kid refetches at most once per cooldown"

        missing = post(base, None)
        assert (missing.status, missing.json()["reason"]) == (401, "CAPABILITY_MISSING")

        mismatch = post(base, token, idempotency_key="not-" + key)
        assert (mismatch.status, mismatch.json()["reason"]) == (403, "KEY_MISMATCH")
        assert ledger_reason(ledger, token, "not-" + key) == "KEY_MISMATCH"

        assert post(base, unsafe_token).status == 200
        reused = post(base, unsafe_token)
        assert (reused.status, reused.json()["reason"]) == (403, "CAPABILITY_REUSED")
        ledger.write_with_capability(unsafe_token, payload=b"{}", retry=False)
        assert ledger_reason(ledger, unsafe_token) == "CAPABILITY_REUSED"
    spent = db["spent_capabilities"].find_one({"sink": sink_name})
    assert spent is not None and spent["_id"] == f"{sink_name}/{spent['jti']}" and spent["tool_id"] == notify
    assert set(spent) == {"_id", "sink", "jti", "tool_id", "call_id", "effect", "spent_at", "expires_at"}

    recorder.close()
    records = cli_rejections(stack, f"sink:{sink_name}")
    by_reason = {r["reason"]: r for r in records}
    assert set(by_reason) == {"BAD_SIGNATURE", "ALGORITHM_NOT_ALLOWED", "UNKNOWN_KEY_ID", "CAPABILITY_MISSING", "KEY_MISMATCH", "CAPABILITY_REUSED"}
    assert all(r["service"] == f"sink:{sink_name}" for r in records)
    assert by_reason["KEY_MISMATCH"]["toolId"] == charge and by_reason["KEY_MISMATCH"]["toolIdVerified"] is True
    assert by_reason["KEY_MISMATCH"]["attemptedKey"] == "not-" + key and by_reason["KEY_MISMATCH"]["capabilityKey"] == key
    assert by_reason["CAPABILITY_REUSED"]["toolId"] == notify and by_reason["CAPABILITY_REUSED"]["code"] == "PERMISSION_DENIED"
    assert by_reason["BAD_SIGNATURE"]["toolId"] == notify and by_reason["BAD_SIGNATURE"]["toolIdVerified"] is False
    assert by_reason["ALGORITHM_NOT_ALLOWED"]["method"] == "HTTP POST /effects"
    assert by_reason["ALGORITHM_NOT_ALLOWED"]["peer"].startswith("127.0.0.1:")
    raw = db["rejections"].find_one({"service": f"sink:{sink_name}", "reason": "KEY_MISMATCH"})
    assert raw is not None and len(raw["_id"]) == 24 and int(raw["_id"], 16) >= 0 and raw["count"] == 1
    assert_listed(db, raw, {"tool": charge, "reason": "KEY_MISMATCH", "service": f"sink:{sink_name}"})
    # No tool known: listed under all, reason and service only.
    missing_cap = db["rejections"].find_one({"service": f"sink:{sink_name}", "reason": "CAPABILITY_MISSING"})
    assert missing_cap is not None and missing_cap["tool_id"] == ""
    assert_listed(db, missing_cap, {"reason": "CAPABILITY_MISSING", "service": f"sink:{sink_name}"})


def _signing_keys_request() -> Any:
    from keycap_client._gen.keycap.kernel.v1 import kernel_pb2

    return kernel_pb2.GetSigningKeysRequest()


def test_http_sink_refuses_a_tool_it_does_not_serve_an_expired_capability_and_unsafe_without_a_store(
    stack: Stack, kernel: KernelClient, db: Database[Any], keys: KernelJwksSource, tools: tuple[str, str], sink_name: str
) -> None:
    charge, notify = tools
    recorder = MongoRefusalRecorder(db, service=f"sink:{sink_name}")
    late = VerifierOptions(clock=lambda: time.time() + 3600)
    token, _ = begin(kernel, charge)
    unsafe_token, _ = begin(kernel, notify)
    only_notify = Sink(sink_name, tools=[notify], keys=keys, refusals=recorder)
    an_hour_later = Sink(sink_name, tools=[charge], keys=keys, verifier=late, refusals=recorder)
    with serve_asgi(SinkMiddleware(effect_app, only_notify)) as a, serve_asgi(SinkMiddleware(effect_app, an_hour_later)) as b:
        wrong_tool = post(a, token)
        assert (wrong_tool.status, wrong_tool.json()["reason"]) == (403, "TOOL_NOT_ACCEPTED")
        no_store = post(a, unsafe_token)
        assert (no_store.status, no_store.json()["reason"]) == (403, "EFFECT_CLASS_MISMATCH")
        expired = post(b, token)
        assert (expired.status, expired.json()["reason"]) == (401, "EXPIRED")
    recorder.close()
    by_reason = {r["reason"]: r for r in cli_rejections(stack, f"sink:{sink_name}")}
    assert by_reason["TOOL_NOT_ACCEPTED"]["toolId"] == charge and by_reason["TOOL_NOT_ACCEPTED"]["toolIdVerified"] is True
    assert by_reason["EXPIRED"]["toolIdVerified"] is True and by_reason["EXPIRED"]["code"] == "UNAUTHENTICATED"
    assert "EFFECT_CLASS_MISMATCH" in by_reason
    # The recorder counted them too (ADR 0025): the totals GetStats reads, by tool.
    by_tool = cli_stats(stack)["rejectionsByTool"]
    assert (by_tool.get(charge), by_tool.get(notify)) == (2, 1)
    counters = db["stats_counters"].find_one({"service": f"sink:{sink_name}"})
    assert counters is not None and counters["_id"].startswith(f"refusals:sink:{sink_name}:")


def test_unavailable_keys_and_store_refuse_retryably_and_are_summarised(
    stack: Stack, kernel: KernelClient, db: Database[Any], keys: KernelJwksSource, tools: tuple[str, str], sink_name: str
) -> None:
    charge, notify = tools
    recorder = MongoRefusalRecorder(db, service=f"sink:{sink_name}")
    no_kernel = KernelJwksSource.from_kernel("127.0.0.1:1", timeout=2)
    broken_client: pymongo.MongoClient[Any] = pymongo.MongoClient(stack.mongodb_uri, serverSelectionTimeoutMS=2000)
    broken_store = MongoSpentStore(broken_client[stack.mongodb_database], sweep_interval=0)
    broken_client.close()  # the store's database is gone from here on
    token, _ = begin(kernel, charge)
    unsafe_token, _ = begin(kernel, notify)
    unkeyed = Sink(sink_name, tools=[charge], keys=no_kernel, refusals=recorder)
    storeless = Sink(sink_name, tools=[notify], keys=keys, spent_store=broken_store, refusals=recorder)
    with serve_asgi(SinkMiddleware(effect_app, unkeyed)) as a, serve_asgi(SinkMiddleware(effect_app, storeless)) as b:
        for base, tok, reason in ((a, token, "SIGNING_KEYS_UNAVAILABLE"), (b, unsafe_token, "DATABASE_UNAVAILABLE")):
            res = post(base, tok)
            assert (res.status, res.json()["reason"], res.json()["retryable"]) == (503, reason, True)
            assert res.headers["retry-after"] == "1"
    no_kernel.close()
    recorder.close()
    records = cli_rejections(stack, f"sink:{sink_name}")
    assert [r["reason"] for r in records] == ["UNAVAILABLE_REFUSALS"]
    summary = db["rejections"].find_one({"service": f"sink:{sink_name}"})
    assert summary is not None
    kind, service, ip, minute = json.loads(summary["_id"])
    assert (kind, service, ip, summary["count"]) == ("ua", f"sink:{sink_name}", "127.0.0.1", 2)
    assert summary["reasons"] == {"SIGNING_KEYS_UNAVAILABLE": 1, "DATABASE_UNAVAILABLE": 1}
    assert minute.endswith(":00.000Z")
    assert_listed(db, summary, {"reason": "UNAVAILABLE_REFUSALS", "service": f"sink:{sink_name}"})


def test_unverified_refusals_past_the_limit_become_one_summary_per_peer_and_minute(
    stack: Stack, db: Database[Any], keys: KernelJwksSource, tools: tuple[str, str], sink_name: str
) -> None:
    recorder = MongoRefusalRecorder(db, service=f"sink:{sink_name}", unauthenticated_per_minute=3)
    sink = Sink(sink_name, tools=[tools[0]], keys=keys, refusals=recorder)
    with serve_asgi(SinkMiddleware(effect_app, sink)) as base:
        for _ in range(8):
            assert post(base, "garbage").status == 401
    recorder.close()
    records = cli_rejections(stack, f"sink:{sink_name}")
    individual = [r for r in records if r["reason"] == "CAPABILITY_MALFORMED"]
    summaries = [r for r in records if r["reason"] == "RATE_LIMITED_REFUSALS"]
    assert len(individual) == 3 and len(summaries) == 1
    assert int(summaries[0]["count"]) == 5
    doc = db["rejections"].find_one({"service": f"sink:{sink_name}", "reason": "RATE_LIMITED_REFUSALS"})
    assert doc is not None and json.loads(doc["_id"])[0] == "rl" and doc["reasons"] == {"CAPABILITY_MALFORMED": 5}
    assert_listed(db, doc, {"reason": "RATE_LIMITED_REFUSALS", "service": f"sink:{sink_name}"})
    for one in db["rejections"].find({"service": f"sink:{sink_name}", "reason": "CAPABILITY_MALFORMED"}):
        assert_listed(db, one, {"reason": "CAPABILITY_MALFORMED", "service": f"sink:{sink_name}"})


class _MarkInserts(pymongo.monitoring.CommandListener):
    """Counts the insert commands sent to listing_marks."""

    def __init__(self) -> None:
        self.count = 0

    def started(self, event: pymongo.monitoring.CommandStartedEvent) -> None:
        if event.command_name == "insert" and event.command.get("insert") == "listing_marks":
            self.count += 1

    def succeeded(self, event: pymongo.monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: pymongo.monitoring.CommandFailedEvent) -> None:
        pass


def test_recorded_refusals_carry_their_second_and_mark_their_buckets_once_before_the_record(
    stack: Stack, db: Database[Any], sink_name: str
) -> None:
    """ADR 0033: the records the ledger's listings walk to. Another second of 2001 each run, so
    its marks are this test's own."""
    service = f"sink:{sink_name}"
    tool = f"py.marks.{uuid.uuid4().hex[:10]}"
    now = [datetime(2001, 1, 1, tzinfo=timezone.utc).timestamp() + random.randrange(365 * 86400) + 0.25]
    inserts = _MarkInserts()
    client: pymongo.MongoClient[Any] = pymongo.MongoClient(stack.mongodb_uri, serverSelectionTimeoutMS=5000, event_listeners=[inserts])
    recorder = MongoRefusalRecorder(client[stack.mongodb_database], service=service, clock=lambda: now[0], flush_interval=3600)
    mismatch = RejectionInput(
        method=METHOD, reason="KEY_MISMATCH", code="PERMISSION_DENIED", peer="ipv4:127.0.0.1:5000",
        message="key mismatch", tool_id_verified=True, tool_id=tool, principal="runtime:py",
    )
    try:
        indexes = {ix["name"]: ix["key"] for ix in db["rejections"].list_indexes()}
        assert dict(indexes["eq_lb"]) == {"lb": 1}
        assert dict({ix["name"]: ix["key"] for ix in db["listing_marks"].list_indexes()}["eq_up"]) == {"up": 1}

        recorder.record(mismatch)
        first = db["rejections"].find_one({"service": service})
        assert first is not None and first["lb"] == datetime.fromtimestamp(now[0], timezone.utc).strftime("%Y%m%d%H%M%S")
        assert_listed(db, first, {"tool": tool, "reason": "KEY_MISMATCH", "service": service})
        assert inserts.count == 1  # all 16 marks in one insert

        # Another refusal in the same second: its marks are known, nothing more is inserted.
        marks_before = db["listing_marks"].count_documents({})
        now[0] += 0.5
        recorder.record(mismatch)
        assert db["rejections"].count_documents({"service": service, "lb": first["lb"]}) == 2
        assert db["listing_marks"].count_documents({}) == marks_before
        assert inserts.count == 1

        # A process that has not seen them (another replica, a restart): duplicates are fine.
        other = MongoRefusalRecorder(db, service=service, clock=lambda: now[0], flush_interval=3600)
        other.record(mismatch)
        other.close()
        assert db["rejections"].count_documents({"service": service, "lb": first["lb"]}) == 3
        assert db["listing_marks"].count_documents({}) == marks_before

        # A summary (upserted): lb from its first refusal, marked by reason and service.
        recorder.record(RejectionInput(method=METHOD, reason="DATABASE_UNAVAILABLE", code="UNAVAILABLE", peer="ipv4:127.0.0.1:5000", message="", tool_id_verified=False))
        recorder.flush()
        summary = db["rejections"].find_one({"service": service, "reason": "UNAVAILABLE_REFUSALS"})
        assert summary is not None and summary["lb"] == first["lb"] and summary["count"] == 1
        assert_listed(db, summary, {"reason": "UNAVAILABLE_REFUSALS", "service": service})
        # Only the reason's 4 marks were new (all and service were known): one more insert.
        assert db["listing_marks"].count_documents({}) == marks_before + 4 and inserts.count == 2
    finally:
        recorder.close()
        client.close()


def _grpc_refusal(call: Any, token: str | None, key: str | None = None) -> KeycapError:
    md = [] if token is None else [("authorization", f"Bearer {token}")]
    if key is not None:
        md.append(("idempotency-key", key))
    with pytest.raises(grpc.RpcError) as caught:
        call(b"{}", metadata=md, timeout=10)
    return KeycapError.from_rpc_error(caught.value)


def test_grpc_sink_gives_the_handler_the_claims_and_refuses_with_the_ledgers_status(
    stack: Stack, kernel: KernelClient, ledger: LedgerClient, db: Database[Any], keys: KernelJwksSource, tools: tuple[str, str], sink_name: str
) -> None:
    from concurrent import futures

    charge, notify = tools
    sink = Sink(sink_name, tools=[charge, notify], keys=keys, spent_store=InMemorySpentStore())
    seen: list[str | None] = []

    def do(request: bytes, context: grpc.ServicerContext) -> bytes:
        cap = capability_of(context)
        seen.append(cap.key)
        return json.dumps({"tool_id": cap.tool_id}).encode()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), interceptors=[SinkInterceptor(sink)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.sink.v1.Effects", {"Do": grpc.unary_unary_rpc_method_handler(do)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    token, key = begin(kernel, charge)
    unsafe_token, _ = begin(kernel, notify)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            call: Any = channel.unary_unary(METHOD)
            assert json.loads(call(b"{}", metadata=[("authorization", f"Bearer {token}"), ("idempotency-key", key)], timeout=10)) == {"tool_id": charge}
            assert seen == [key]
            for forged, reason in ((tampered(token, key="x" + key), "BAD_SIGNATURE"), (alg_none(token), "ALGORITHM_NOT_ALLOWED"), (signed_by_attacker(token), "UNKNOWN_KEY_ID")):
                err = _grpc_refusal(call, forged)
                assert (err.code, err.reason, err.domain) == (grpc.StatusCode.UNAUTHENTICATED, reason, ERROR_DOMAIN)
                assert err.reason == ledger_reason(ledger, forged, key)
            err = _grpc_refusal(call, token, "other")
            assert (err.code, err.reason) == (grpc.StatusCode.PERMISSION_DENIED, "KEY_MISMATCH")
            assert call(b"{}", metadata=[("authorization", f"Bearer {unsafe_token}")], timeout=10)
            err = _grpc_refusal(call, unsafe_token)
            assert (err.code, err.reason, err.domain) == (grpc.StatusCode.PERMISSION_DENIED, "CAPABILITY_REUSED", ERROR_DOMAIN)
            assert seen == [key, None]
    finally:
        server.stop(None)


def test_asyncio_grpc_sink_admits_and_refuses_the_same_way(kernel: KernelClient, keys: KernelJwksSource, tools: tuple[str, str], sink_name: str) -> None:
    charge, _ = tools
    sink = Sink(sink_name, tools=[charge], keys=keys)
    token, key = begin(kernel, charge)

    async def do(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return (capability_of(context).key or "").encode()

    async def run() -> None:
        server = grpc.aio.server(interceptors=[AsyncSinkInterceptor(sink)])
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.sink.v1.Effects", {"Do": grpc.unary_unary_rpc_method_handler(do)}),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                call: Any = channel.unary_unary(METHOD)
                assert await call(b"{}", metadata=[("authorization", f"Bearer {token}")], timeout=10) == key.encode()
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await call(b"{}", metadata=[("authorization", f"Bearer {alg_none(token)}")], timeout=10)
                err = KeycapError.from_rpc_error(caught.value)
                assert (err.code, err.reason, err.domain) == (grpc.StatusCode.UNAUTHENTICATED, "ALGORITHM_NOT_ALLOWED", ERROR_DOMAIN)
        finally:
            await server.stop(None)

    asyncio.run(run())


def test_mongodb_spent_store_lets_one_of_racing_presentations_through_and_sweeps_expired_records(
    kernel: KernelClient, db: Database[Any], keys: KernelJwksSource, tools: tuple[str, str], sink_name: str
) -> None:
    import threading

    from keycap_client.sink import AdmissionContext, SinkRefusal

    _, notify = tools
    store = MongoSpentStore(db, sweep_interval=0)
    sink = Sink(sink_name, tools=[notify], keys=keys, spent_store=store)
    token, _ = begin(kernel, notify)
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def present() -> None:
        barrier.wait()
        try:
            sink.admit(f"Bearer {token}", AdmissionContext(METHOD, "127.0.0.1:1"))
            outcomes.append("admitted")
        except SinkRefusal as err:
            outcomes.append(err.reason)

    threads = [threading.Thread(target=present) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["CAPABILITY_REUSED"] * 7 + ["admitted"]

    assert db["spent_capabilities"].count_documents({"sink": sink_name}) == 1
    later = MongoSpentStore(db, sweep_interval=0, clock=lambda: time.time() + 3600)
    assert later.sweep() >= 1
    assert db["spent_capabilities"].count_documents({"sink": sink_name}) == 0


def test_keys_come_from_a_tls_kernel_only_under_its_pinned_ca(tls_stack: Stack) -> None:
    from keycap_client import TlsOptions
    from keycap_client.sink import AdmissionContext, SinkRefusal

    tls = tls_stack.tls
    assert tls is not None
    ok = TlsOptions(ca_file=tls.ca_file)
    tool = f"py.sink.tls.{uuid.uuid4().hex[:10]}"
    with KernelClient(tls_stack.kernel, token=tls_stack.runtime_token, tls=ok) as k:
        k.register_tool(ToolDefinition(tool, Idempotent(KeyDerivation(["/order_id"]))))
        begun = k.begin_call(tool, json.dumps({"order_id": "o-tls"}))
    context = AdmissionContext(METHOD, "127.0.0.1:1")
    pinned = KernelJwksSource.from_kernel(tls_stack.kernel, tls=ok)
    assert Sink("tls", tools=[tool], keys=pinned).admit(f"Bearer {begun.capability}", context).key == begun.call.key
    impostor_ca = KernelJwksSource.from_kernel(tls_stack.kernel, tls=TlsOptions(ca_file=tls.other_ca_file), timeout=2)
    with pytest.raises(SinkRefusal) as caught:
        Sink("tls", tools=[tool], keys=impostor_ca).admit(f"Bearer {begun.capability}", context)
    assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.UNAVAILABLE, "SIGNING_KEYS_UNAVAILABLE")
    pinned.close()
    impostor_ca.close()


def test_sandbox_capabilities_from_the_kernel_are_refused_as_not_live_even_with_the_live_key(
    stack: Stack, kernel: KernelClient, db: Database[Any], keys: KernelJwksSource, tools: tuple[str, str], sink_name: str
) -> None:
    """ADR 0028: a replay or shadow capability is refused SANDBOX_CAPABILITY_NOT_LIVE by the
    sink (HTTP and gRPC), recorded against the verified tool, and the handler never runs."""
    charge, _ = tools
    run = f"py-sink-rec-{uuid.uuid4().hex[:8]}"
    live = kernel.begin(charge, {"order_id": "S-1"}, run_id=run)
    live.write(b"charged")
    args = json.dumps({"order_id": "S-1"})
    sandboxed = {
        "replay": kernel.begin_call(charge, args, run_id=f"{run}-replay", mode=Replay(run)).capability,
        "shadow": kernel.begin_call(charge, args, run_id=f"{run}-shadow", mode=Shadow(run)).capability,
    }
    recorder = MongoRefusalRecorder(db, service=f"sink:{sink_name}")
    sink = Sink(sink_name, tools=[charge], keys=keys, refusals=recorder)
    handled: list[str] = []

    def handler(request: Any, context: grpc.ServicerContext) -> bytes:
        handled.append(capability_of(context).call_id)
        return b""

    server = grpc.server(ThreadPoolExecutor(max_workers=2), interceptors=[SinkInterceptor(sink)])
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("test.sink.v1.Effects", {"Do": grpc.unary_unary_rpc_method_handler(handler)})]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with serve_asgi(SinkMiddleware(effect_app, sink)) as base, grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            call: Any = channel.unary_unary(METHOD)
            for mode, token in sandboxed.items():
                answer = post(base, token, idempotency_key=live.key)
                assert (answer.status, answer.json()["reason"]) == (403, "SANDBOX_CAPABILITY_NOT_LIVE"), mode
                err = _grpc_refusal(call, token)
                assert (err.code, err.reason, err.metadata["mode"]) == (grpc.StatusCode.PERMISSION_DENIED, "SANDBOX_CAPABILITY_NOT_LIVE", mode)
    finally:
        server.stop(None)
        recorder.close()
    assert handled == []
    rows = [r for r in cli_rejections(stack, f"sink:{sink_name}") if r["reason"] == "SANDBOX_CAPABILITY_NOT_LIVE"]
    assert sum(r.get("count", 1) or 1 for r in rows) == 4
    assert all(r["toolId"] == charge and r["toolIdVerified"] is True for r in rows)
