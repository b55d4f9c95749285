"""The client core (keycap_client._core) without a network: the flows the sync and asyncio
clients both run, and the two runtimes driving one flow to the same calls and result."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from keycap_client import BeginItem, KeycapError, Live, Replay, Shadow, _rpc
from keycap_client._core.call import Flow, Rpc
from keycap_client._core.kernel import KernelCore
from keycap_client._core import ledger
from keycap_client._gen.keycap.kernel.v1 import kernel_pb2
from keycap_client.aio import _rpc as aio_rpc
from keycap_client.errors import _rpc_types

T = TypeVar("T")


def drive(flow: Flow[T], answer: Callable[[Rpc], Any]) -> tuple[T, list[Rpc]]:
    """Runs ``flow`` with ``answer`` as the network: its result and the calls it made."""
    made: list[Rpc] = []
    res: Any = None
    while True:
        try:
            rpc = flow.send(res)
        except StopIteration as done:
            result: T = done.value
            return result, made
        made.append(rpc)
        res = answer(rpc)


def _two_pages(rpc: Rpc) -> kernel_pb2.ListToolsResponse:
    assert isinstance(rpc.request, kernel_pb2.ListToolsRequest)
    if rpc.request.page_token == "":
        return kernel_pb2.ListToolsResponse(tools=[kernel_pb2.Tool(tool_id="a")], next_page_token="p2")
    return kernel_pb2.ListToolsResponse(tools=[kernel_pb2.Tool(tool_id="b")])


def test_a_listing_follows_every_page_with_the_clients_bearer() -> None:
    tools, made = drive(KernelCore("s3cret").list_tools(), _two_pages)
    assert [t.tool_id for t in tools] == ["a", "b"]
    assert [(r.method, r.request.page_token, r.request.page_size, r.bearer, r.retry) for r in made] == [  # type: ignore[attr-defined]
        ("ListTools", "", 1000, "s3cret", True),
        ("ListTools", "p2", 1000, "s3cret", True),
    ]
    assert "s3cret" not in repr(made[0])


def test_begin_gives_handle_for_its_arguments_and_no_expiry_the_kernel_left_out() -> None:
    call = kernel_pb2.Call(call_id="c-1", tool_id="t")
    (got, capability, expires, recorded), made = drive(
        KernelCore(None).begin("t", {"b": 1, "a": [2]}, call_id="", run_id="r"),
        lambda rpc: kernel_pb2.BeginCallResponse(call=call, capability="cap"),
    )
    assert (got, capability, expires, recorded) == (call, "cap", None, None)
    (rpc,) = made
    assert rpc.method == "BeginCall" and rpc.bearer is None
    assert rpc.request.mode == kernel_pb2.RUN_MODE_LIVE  # type: ignore[attr-defined]
    assert rpc.request.arguments_json == '{"b":1,"a":[2]}'  # type: ignore[attr-defined]
    assert rpc.request.call_id != ""  # type: ignore[attr-defined]  # chosen once, so a retry finds the same call


def test_a_clients_run_mode_is_sent_on_every_begin_unless_the_call_names_its_own() -> None:
    recorded = kernel_pb2.Call(call_id="rec-0", tool_id="t")
    answer = kernel_pb2.BeginCallResponse(call=kernel_pb2.Call(call_id="c", tool_id="t"), capability="cap", recorded_call=recorded)
    core = KernelCore(None, Replay("run-1"))
    (_, _, _, matched), (replayed,) = drive(core.begin("t", "{}", call_id="", run_id="run-1b"), lambda rpc: answer)
    assert matched == recorded
    _, (shadowed,) = drive(core.begin("t", "{}", call_id="", run_id="s", mode=Shadow("live-1")), lambda rpc: answer)
    _, (live,) = drive(core.begin("t", "{}", call_id="", run_id="l", mode=Live()), lambda rpc: answer)
    sent = [(r.request.mode, r.request.replay_of_run_id, r.request.shadows_run_id) for r in (replayed, shadowed, live)]  # type: ignore[attr-defined]
    assert sent == [
        (kernel_pb2.RUN_MODE_REPLAY, "run-1", ""),
        (kernel_pb2.RUN_MODE_SHADOW, "", "live-1"),
        (kernel_pb2.RUN_MODE_LIVE, "", ""),
    ]


def test_a_batch_sends_one_begin_calls_in_one_mode_and_reads_each_refusal() -> None:
    refused = KeycapError(grpc.StatusCode.FAILED_PRECONDITION, "REPLAY_DIVERGED", "diverged", {"position": "1"})
    types: tuple[Any, ...] = _rpc_types()
    status_type, info_type = types[0], types[1]
    info = info_type(reason="REPLAY_DIVERGED", domain="keycap.dev", metadata={"position": "1"})
    st = status_type(code=grpc.StatusCode.FAILED_PRECONDITION.value[0], message="diverged")
    st.details.add().Pack(info)
    answer = kernel_pb2.BeginCallsResponse(
        results=[
            kernel_pb2.BeginCallResult(begun=kernel_pb2.BeginCallResponse(call=kernel_pb2.Call(call_id="c"), capability="cap")),
            kernel_pb2.BeginCallResult(error_status=st.SerializeToString()),
        ]
    )
    items = [BeginItem("t", {"a": 1}, run_id="r"), BeginItem("t", "{}", call_id="c2", run_id="r")]
    (begun, error), (rpc,) = drive(KernelCore(None).begin_many(items, mode=Replay("run-1")), lambda rpc: answer)
    assert rpc.method == "BeginCalls"
    assert [(c.mode, c.replay_of_run_id, c.call_id != "") for c in rpc.request.calls] == [(kernel_pb2.RUN_MODE_REPLAY, "run-1", True)] * 2  # type: ignore[attr-defined]
    assert not isinstance(begun, KeycapError) and begun[1] == "cap"
    assert isinstance(error, KeycapError)
    assert (error.code, error.reason, dict(error.metadata)) == (refused.code, refused.reason, dict(refused.metadata))


def test_a_single_use_write_is_not_retried_and_carries_the_capability() -> None:
    flow = ledger.write_with_capability("cap", key="", request_id="req-1", payload="é", retry=False)
    _, (rpc,) = drive(flow, lambda rpc: None)
    assert (rpc.method, rpc.bearer, rpc.retry, rpc.request.payload) == ("Write", "cap", False, "é".encode())  # type: ignore[attr-defined]


class _Stub:
    """A stub whose ListTools answers two pages, and records each call's options."""

    def __init__(self, awaited: bool) -> None:
        self.options: list[dict[str, Any]] = []
        self.awaited = awaited

    def __getattr__(self, name: str) -> Callable[..., Any]:
        assert name == "ListTools"

        def call(request: Any, **options: Any) -> Any:
            self.options.append(options)
            res = _two_pages(Rpc(name, request, None))
            if not self.awaited:
                return res

            async def later() -> Any:
                return res

            return later()

        return call


def test_the_blocking_and_the_asyncio_runtime_make_the_same_calls_for_one_flow() -> None:
    sync_stub, async_stub = _Stub(awaited=False), _Stub(awaited=True)
    blocking = _rpc.run(KernelCore("s").list_tools(), sync_stub, 5.0)
    awaited = asyncio.run(aio_rpc.run(KernelCore("s").list_tools(), async_stub, 5.0))
    assert blocking == awaited and [t.tool_id for t in blocking] == ["a", "b"]
    for stub in (sync_stub, async_stub):
        assert [(o["metadata"], o["wait_for_ready"]) for o in stub.options] == [((("authorization", "Bearer s"),), True)] * 2
        assert all(0 < o["timeout"] <= 5.0 for o in stub.options)
