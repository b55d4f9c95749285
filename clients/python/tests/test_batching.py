"""Issue 33 (ADR 0022 for Python) and ADR 0037: the begins, completes and writes that concurrent
threads (sync client) or tasks (asyncio client) make travel in BeginCalls / CompleteCalls /
Writes batches against the real kernel and ledger, each answered as if it had been sent alone
(a refused call among them gets its own refusal, a write its own entry); ``batching=False``
sends one RPC per call. The RPCs are counted on the
client's channel (an interceptor on the channel the client opens).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import grpc.aio
import pytest

import keycap_client._rpc as sync_rpc
import keycap_client.aio._rpc as aio_rpc
from conftest import Stack
from keycap_client import Idempotent, KernelClient, KeyDerivation, KeycapError, ToolDefinition
from keycap_client.aio import AsyncKernelClient

CALLS = 48
#: The completes carry a detail so that they are sent: a plain complete("succeeded") after
#: a write the ledger answered completes_call is answered by the handle, with no RPC to batch
#: (ADR 0034, tests/test_completes_call.py).
DETAIL = "charged"


class _Count(grpc.UnaryUnaryClientInterceptor):
    def __init__(self, seen: Counter[str]) -> None:
        self.seen = seen

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        self.seen[details.method.rsplit("/", 1)[-1]] += 1
        return continuation(details, request)


class _AioCount(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, seen: Counter[str]) -> None:
        self.seen = seen

    async def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        self.seen[method.rsplit("/", 1)[-1]] += 1
        return await continuation(details, request)


@pytest.fixture
def rpcs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Every unary RPC the clients made in this test send, by method."""
    seen: Counter[str] = Counter()
    monkeypatch.setattr(sync_rpc, "open_channel", lambda address, _creds: grpc.intercept_channel(grpc.insecure_channel(address), _Count(seen)))
    monkeypatch.setattr(aio_rpc, "open_channel", lambda address, _creds: grpc.aio.insecure_channel(address, interceptors=[_AioCount(seen)]))
    yield seen


@pytest.fixture(scope="module")
def charge(stack: Stack) -> str:
    tool = f"py.batch.charge.{uuid.uuid4().hex[:8]}"
    with KernelClient(stack.kernel) as k:
        k.register_tool(ToolDefinition(tool, Idempotent(KeyDerivation(["/order_id"]))))
    return tool


def _tool_of(i: int, charge: str) -> str:
    # Every eighth call names a tool that does not exist: refused alone, whatever batch it rode in.
    return f"{charge}.missing" if i % 8 == 7 else charge


def _check(results: list[object], seen: Counter[str], batched: bool) -> None:
    for i, r in enumerate(results):
        if i % 8 == 7:
            assert isinstance(r, KeycapError) and (r.code, r.reason) == (grpc.StatusCode.NOT_FOUND, "TOOL_NOT_FOUND"), r
        else:
            assert r == "ok", r
    written = sum(1 for r in results if r == "ok")
    if batched:
        assert seen["BeginCalls"] >= 1 and seen["CompleteCalls"] >= 1 and seen["BeginCall"] < CALLS, seen
        assert seen["Writes"] >= 1 and seen["Write"] < written, seen
    else:
        assert (seen["BeginCalls"], seen["CompleteCalls"], seen["BeginCall"]) == (0, 0, CALLS), seen
        assert (seen["Writes"], seen["Write"]) == (0, written), seen


@pytest.mark.parametrize("batched", [True, False], ids=["batched by default", "batching=False"])
def test_concurrent_threads_calls_travel_in_batches_each_answered_alone(stack: Stack, charge: str, rpcs: Counter[str], batched: bool) -> None:
    results: list[object] = [None] * CALLS
    start = threading.Barrier(CALLS)
    with KernelClient(stack.kernel, ledger_address=stack.ledger, batching=batched) as kernel:

        def one(i: int) -> None:
            start.wait()
            try:
                handle = kernel.begin(_tool_of(i, charge), {"order_id": uuid.uuid4().hex})
                w = handle.write(b"charged")
                assert (w.entry.call_id, w.duplicate) == (handle.call_id, False), w
                handle.complete("succeeded", DETAIL)
                results[i] = "ok"
            except KeycapError as err:
                results[i] = err

        threads = [threading.Thread(target=one, args=(i,)) for i in range(CALLS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    _check(results, rpcs, batched)


@pytest.mark.parametrize("batched", [True, False], ids=["batched by default", "batching=False"])
def test_concurrent_tasks_calls_travel_in_batches_each_answered_alone(stack: Stack, charge: str, rpcs: Counter[str], batched: bool) -> None:
    async def scenario() -> list[object]:
        async with AsyncKernelClient(stack.kernel, ledger_address=stack.ledger, batching=batched) as kernel:

            async def one(i: int) -> object:
                try:
                    handle = await kernel.begin(_tool_of(i, charge), {"order_id": uuid.uuid4().hex})
                    w = await handle.write(b"charged")
                    assert (w.entry.call_id, w.duplicate) == (handle.call_id, False), w
                    await handle.complete("succeeded", DETAIL)
                    return "ok"
                except KeycapError as err:
                    return err

            return list(await asyncio.gather(*(one(i) for i in range(CALLS))))

    _check(asyncio.run(scenario()), rpcs, batched)
