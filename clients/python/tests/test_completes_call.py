"""ADR 0034, the client's side: after a write whose entry completes the call (the ledger
answered ``completes_call``), ``complete("succeeded")`` is answered by the handle and sends
no CompleteCall, alone or in a CompleteCalls batch; a failure, a detail, or a write that did
not complete the call is sent as before. A real gRPC server stands in for the kernel and the
ledger and counts the RPCs it receives."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any, Literal

import grpc
import pytest
from google.protobuf.message import Message

from keycap_client import KernelClient
from keycap_client._gen.keycap.effect.v1 import effect_pb2
from keycap_client._gen.keycap.kernel.v1 import kernel_pb2
from keycap_client._gen.keycap.ledger.v1 import ledger_pb2
from keycap_client.aio import AsyncKernelClient


class FakeKeycap:
    """A kernel that begins Idempotent calls and completes any, and a ledger whose Write
    answers ``completes_call`` as told; every RPC is counted by method."""

    def __init__(self, completes_call: bool) -> None:
        self.completes_call = completes_call
        self.seen: Counter[str] = Counter()
        self.completed: list[kernel_pb2.CompleteCallRequest] = []
        #: The receipts each BeginCalls carried (ADR 0035), by call id.
        self.receipts: list[str] = []
        self.begin_delay_s = 0.0
        self._lock = threading.Lock()

    def _count(self, method: str) -> None:
        with self._lock:
            self.seen[method] += 1

    def begin_call(self, request: kernel_pb2.BeginCallRequest, context: grpc.ServicerContext) -> kernel_pb2.BeginCallResponse:
        self._count("BeginCall")
        return self._begun(request)

    def _begun(self, request: kernel_pb2.BeginCallRequest) -> kernel_pb2.BeginCallResponse:
        # Slow enough that concurrent calls queue behind the one in flight and go as a batch.
        time.sleep(self.begin_delay_s)
        call = kernel_pb2.Call(
            call_id=request.call_id,
            tool_id=request.tool_id,
            effect_kind=effect_pb2.EFFECT_KIND_IDEMPOTENT,
            key=f"idem:{request.call_id}",
            state=kernel_pb2.CALL_STATE_PENDING,
            attempt=1,
        )
        return kernel_pb2.BeginCallResponse(call=call, capability="cap")

    def begin_calls(self, request: kernel_pb2.BeginCallsRequest, context: grpc.ServicerContext) -> kernel_pb2.BeginCallsResponse:
        with self._lock:
            self.receipts.extend(r.call_id for r in request.receipts)
        self._count("BeginCalls")
        results = [kernel_pb2.BeginCallResult(begun=self._begun(c)) for c in request.calls]
        return kernel_pb2.BeginCallsResponse(results=results)

    def _completion(self, request: kernel_pb2.CompleteCallRequest) -> kernel_pb2.CompleteCallResponse:
        with self._lock:
            self.completed.append(request)
        call = kernel_pb2.Call(
            call_id=request.call_id,
            state=kernel_pb2.CALL_STATE_COMPLETED,
            outcome=request.outcome,
            outcome_detail=request.outcome_detail,
        )
        return kernel_pb2.CompleteCallResponse(call=call)

    def complete_call(
        self, request: kernel_pb2.CompleteCallRequest, context: grpc.ServicerContext
    ) -> kernel_pb2.CompleteCallResponse:
        self._count("CompleteCall")
        return self._completion(request)

    def complete_calls(
        self, request: kernel_pb2.CompleteCallsRequest, context: grpc.ServicerContext
    ) -> kernel_pb2.CompleteCallsResponse:
        self._count("CompleteCalls")
        results = [kernel_pb2.CompleteCallResult(completed=self._completion(c)) for c in request.calls]
        return kernel_pb2.CompleteCallsResponse(results=results)

    def write(self, request: ledger_pb2.WriteRequest, context: grpc.ServicerContext) -> ledger_pb2.WriteResponse:
        self._count("Write")
        entry = ledger_pb2.Entry(key=request.key, payload=request.payload)
        if not self.completes_call:
            return ledger_pb2.WriteResponse(entry=entry, completes_call=False)
        call_id = request.key.removeprefix("idem:")
        receipt = effect_pb2.CompletionReceipt(call_id=call_id, recorded_at_ms=1, mac=b"m" * 32)
        return ledger_pb2.WriteResponse(entry=entry, completes_call=True, completion_receipt=receipt)


def _unary(fn: Callable[[Any, grpc.ServicerContext], Any], req: type[Message], res: type[Message]) -> grpc.RpcMethodHandler[Any, Any]:
    return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=req.FromString, response_serializer=res.SerializeToString)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(fake: FakeKeycap) -> tuple[grpc.Server, str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    kernel = grpc.method_handlers_generic_handler(
        "keycap.kernel.v1.KernelService",
        {
            "BeginCall": _unary(fake.begin_call, kernel_pb2.BeginCallRequest, kernel_pb2.BeginCallResponse),
            "BeginCalls": _unary(fake.begin_calls, kernel_pb2.BeginCallsRequest, kernel_pb2.BeginCallsResponse),
            "CompleteCall": _unary(fake.complete_call, kernel_pb2.CompleteCallRequest, kernel_pb2.CompleteCallResponse),
            "CompleteCalls": _unary(fake.complete_calls, kernel_pb2.CompleteCallsRequest, kernel_pb2.CompleteCallsResponse),
        },
    )
    ledger = grpc.method_handlers_generic_handler(
        "keycap.ledger.v1.LedgerService",
        {"Write": _unary(fake.write, ledger_pb2.WriteRequest, ledger_pb2.WriteResponse)},
    )
    server.add_generic_rpc_handlers((kernel, ledger))
    address = f"127.0.0.1:{_free_port()}"
    server.add_insecure_port(address)
    server.start()
    return server, address


@contextmanager
def _fake(completes_call: bool) -> Iterator[tuple[FakeKeycap, str]]:
    fake = FakeKeycap(completes_call)
    server, address = _serve(fake)
    try:
        yield fake, address
    finally:
        server.stop(None)


@pytest.fixture
def completing() -> Iterator[tuple[FakeKeycap, str]]:
    """A ledger whose entries complete their calls (ADR 0034)."""
    with _fake(True) as served:
        yield served


@pytest.fixture
def not_completing() -> Iterator[tuple[FakeKeycap, str]]:
    """A ledger older than ADR 0034 (or a write that does not complete the call)."""
    with _fake(False) as served:
        yield served


def _completes(fake: FakeKeycap) -> int:
    return fake.seen["CompleteCall"] + fake.seen["CompleteCalls"]


@pytest.mark.parametrize("batching", [True, False], ids=["batching", "unary"])
def test_a_success_after_a_completing_write_is_answered_without_complete_call(
    completing: tuple[FakeKeycap, str], batching: bool
) -> None:
    fake, address = completing
    with KernelClient(address, ledger_address=address, token="t", timeout=10, batching=batching) as kernel:
        handle = kernel.begin("payments.charge", {"order_id": "o-1"})
        assert handle.completed_by_write is False
        assert handle.write(b"charged").completes_call is True
        assert handle.completed_by_write is True
        res = handle.complete()
    assert (fake.seen["Write"], _completes(fake)) == (1, 0), fake.seen
    assert res.call.call_id == handle.call_id
    assert (res.call.state, res.call.outcome) == (kernel_pb2.CALL_STATE_COMPLETED, kernel_pb2.CALL_OUTCOME_SUCCEEDED)
    assert res.already_completed is False
    # The handle's own snapshot of the call is unchanged (the answer is a copy).
    assert handle.call.state == kernel_pb2.CALL_STATE_PENDING


@pytest.mark.parametrize(
    ("outcome", "detail"), [("failed", ""), ("failed", "card declined"), ("succeeded", "charged 500")],
    ids=["failed", "failed-with-detail", "succeeded-with-detail"],
)
def test_a_failure_or_a_detail_after_a_completing_write_is_still_sent(
    completing: tuple[FakeKeycap, str], outcome: Literal["succeeded", "failed"], detail: str
) -> None:
    fake, address = completing
    with KernelClient(address, ledger_address=address, token="t", timeout=10) as kernel:
        handle = kernel.begin("payments.charge", {"order_id": "o-1"})
        handle.write(b"charged")
        res = handle.complete(outcome, detail)
    assert _completes(fake) == 1, fake.seen
    assert [(c.call_id, c.outcome_detail) for c in fake.completed] == [(handle.call_id, detail)]
    assert res.call.outcome_detail == detail


def test_a_success_after_a_write_that_does_not_complete_the_call_is_sent(
    not_completing: tuple[FakeKeycap, str],
) -> None:
    fake, address = not_completing
    with KernelClient(address, ledger_address=address, token="t", timeout=10) as kernel:
        handle = kernel.begin("payments.charge", {"order_id": "o-1"})
        assert handle.write(b"charged").completes_call is False
        handle.complete()
    assert handle.completed_by_write is False
    assert _completes(fake) == 1, fake.seen
    assert fake.completed[0].outcome == kernel_pb2.CALL_OUTCOME_SUCCEEDED


def test_a_success_without_a_write_is_sent(completing: tuple[FakeKeycap, str]) -> None:
    fake, address = completing
    with KernelClient(address, ledger_address=address, token="t", timeout=10) as kernel:
        kernel.begin("payments.charge", {"order_id": "o-1"}).complete()
    assert _completes(fake) == 1, fake.seen


def test_concurrent_completing_calls_send_no_complete_calls_batch(completing: tuple[FakeKeycap, str]) -> None:
    fake, address = completing
    with KernelClient(address, ledger_address=address, token="t", timeout=10) as kernel:

        def one(i: int) -> kernel_pb2.CompleteCallResponse:
            handle = kernel.begin("payments.charge", {"order_id": f"o-{i}"})
            handle.write(b"charged")
            return handle.complete()

        with futures.ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(one, range(32)))
    assert all(a.call.state == kernel_pb2.CALL_STATE_COMPLETED for a in answers)
    assert (fake.seen["Write"], _completes(fake)) == (32, 0), fake.seen


@pytest.mark.parametrize("completes_call", [True, False], ids=["completing", "not-completing"])
def test_the_asyncio_handle_does_the_same(completes_call: bool) -> None:
    with _fake(completes_call) as (fake, address):

        async def scenario() -> kernel_pb2.CompleteCallResponse:
            async with AsyncKernelClient(address, ledger_address=address, token="t", timeout=10) as kernel:
                handle = await kernel.begin("payments.charge", {"order_id": "o-1"})
                await handle.write(b"charged")
                assert handle.completed_by_write is completes_call
                return await handle.complete()

        res = asyncio.run(scenario())
        assert (res.call.state, res.call.outcome) == (kernel_pb2.CALL_STATE_COMPLETED, kernel_pb2.CALL_OUTCOME_SUCCEEDED)
        assert _completes(fake) == (0 if completes_call else 1), fake.seen

        async def failed() -> None:
            async with AsyncKernelClient(address, ledger_address=address, token="t", timeout=10) as kernel:
                handle = await kernel.begin("payments.charge", {"order_id": "o-2"})
                await handle.write(b"charged")
                await handle.complete("failed")

        asyncio.run(failed())
        assert _completes(fake) == (1 if completes_call else 2), fake.seen


def test_concurrent_calls_forward_the_ledger_receipts_with_their_next_begin_calls(completing: tuple[FakeKeycap, str]) -> None:
    """ADR 0035: each receipt rides once on a later BeginCalls, unchanged."""
    fake, address = completing
    fake.begin_delay_s = 0.01
    written: list[str] = []
    lock = threading.Lock()
    with KernelClient(address, ledger_address=address, token="t", timeout=10) as kernel:

        def one(i: int) -> None:
            handle = kernel.begin("payments.charge", {"order_id": f"o-{i}"})
            handle.write(b"charged")
            with lock:
                written.append(handle.call_id)

        with futures.ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(one, range(64)))
    assert fake.seen["BeginCalls"] > 0, fake.seen
    assert fake.receipts, "no BeginCalls carried a receipt"
    assert len(fake.receipts) == len(set(fake.receipts)), "a receipt rode twice"
    assert set(fake.receipts) <= set(written)


def test_without_batching_no_receipt_is_sent(completing: tuple[FakeKeycap, str]) -> None:
    fake, address = completing
    with KernelClient(address, ledger_address=address, token="t", timeout=10, batching=False) as kernel:
        for i in range(3):
            kernel.begin("payments.charge", {"order_id": f"o-{i}"}).write(b"charged")
    assert (fake.seen["BeginCalls"], fake.receipts) == (0, []), fake.seen


def test_the_asyncio_client_forwards_receipts_too(completing: tuple[FakeKeycap, str]) -> None:
    fake, address = completing
    fake.begin_delay_s = 0.01

    async def scenario() -> list[str]:
        async with AsyncKernelClient(address, ledger_address=address, token="t", timeout=10) as kernel:

            async def one(i: int) -> str:
                handle = await kernel.begin("payments.charge", {"order_id": f"o-{i}"})
                await handle.write(b"charged")
                return handle.call_id

            first = await asyncio.gather(*(one(i) for i in range(16)))
            await asyncio.gather(*(one(100 + i) for i in range(16)))
            return first

    first = asyncio.run(scenario())
    assert fake.receipts, fake.seen
    assert set(first) & set(fake.receipts), "the first round's receipts rode on the second round's BeginCalls"
