"""The asyncio client through a service that is restarting (issue 14, with issue 15's policy):
a call waits for the channel to be ready, an UNAVAILABLE answer is retried within the
deadline with ``asyncio.sleep`` (the event loop keeps running), and a single-use
capability's write is not retried. A real ``grpc.aio`` server stands in for the ledger,
in the test's own event loop, so the failures happen exactly when the test says."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import grpc
import grpc.aio
import pytest

from keycap_client import KeycapError
from keycap_client._gen.keycap.effect.v1 import effect_pb2
from keycap_client._gen.keycap.kernel.v1 import kernel_pb2
from keycap_client._gen.keycap.ledger.v1 import ledger_pb2
from keycap_client.aio import AsyncKernelClient, AsyncLedgerClient


class FlakyLedger:
    """LedgerService.Write answering UNAVAILABLE `failures` times, then OK."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def write(
        self, request: ledger_pb2.WriteRequest, context: grpc.aio.ServicerContext[ledger_pb2.WriteRequest, ledger_pb2.WriteResponse]
    ) -> ledger_pb2.WriteResponse:
        self.calls += 1
        if self.calls <= self.failures:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the database is unavailable; retry")
        return ledger_pb2.WriteResponse(duplicate=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _start(port: int, ledger: FlakyLedger) -> grpc.aio.Server:
    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler(
        "keycap.ledger.v1.LedgerService",
        {
            "Write": grpc.unary_unary_rpc_method_handler(
                ledger.write,
                request_deserializer=ledger_pb2.WriteRequest.FromString,
                response_serializer=ledger_pb2.WriteResponse.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server


@asynccontextmanager
async def serving(port: int, ledger: FlakyLedger) -> AsyncIterator[str]:
    server = await _start(port, ledger)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


@pytest.fixture
def port() -> Iterator[int]:
    yield _free_port()


def test_unavailable_answers_are_retried_until_one_succeeds(port: int) -> None:
    flaky = FlakyLedger(failures=2)

    async def scenario() -> None:
        async with serving(port, flaky) as address, AsyncLedgerClient(address, timeout=10) as ledger:
            res = await ledger.write_with_capability("cap", key="k", payload=b"x")
        assert res.duplicate is False
        assert flaky.calls == 3

    asyncio.run(scenario())


def test_a_single_use_write_is_not_retried(port: int) -> None:
    flaky = FlakyLedger(failures=1)

    async def scenario() -> None:
        async with serving(port, flaky) as address, AsyncLedgerClient(address, timeout=10) as ledger:
            with pytest.raises(KeycapError) as info:
                await ledger.write_with_capability("cap", request_id="r", payload=b"x", retry=False)
        assert info.value.code == grpc.StatusCode.UNAVAILABLE
        assert info.value.reason == "UNAVAILABLE"
        assert flaky.calls == 1

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("effect_kind", "retried"),
    [
        (effect_pb2.EFFECT_KIND_IDEMPOTENT, True),
        (effect_pb2.EFFECT_KIND_QUERYABLE, False),
        (effect_pb2.EFFECT_KIND_UNSAFE, False),
    ],
    ids=["idempotent", "queryable", "unsafe"],
)
def test_a_handle_retries_only_an_idempotent_write(port: int, effect_kind: effect_pb2.EffectKind, retried: bool) -> None:
    flaky = FlakyLedger(failures=1)
    call = kernel_pb2.Call(call_id="c-1", tool_id="t", effect_kind=effect_kind, key="k" if retried else "", request_id="r")

    async def scenario() -> None:
        async with (
            serving(port, flaky) as address,
            # handle_for sends nothing to the kernel: no kernel needs to listen here.
            AsyncKernelClient("127.0.0.1:1", ledger_address=address, token="", timeout=10) as kernel,
        ):
            handle = kernel.handle_for(call, "cap", None)
            if retried:
                assert (await handle.write(b"x")).duplicate is False
            else:
                with pytest.raises(KeycapError) as info:
                    await handle.write(b"x")
                assert info.value.code == grpc.StatusCode.UNAVAILABLE
        assert flaky.calls == (2 if retried else 1)

    asyncio.run(scenario())


def test_retries_stop_at_the_deadline(port: int) -> None:
    flaky = FlakyLedger(failures=10**9)

    async def scenario() -> None:
        async with serving(port, flaky) as address, AsyncLedgerClient(address, timeout=1.0) as ledger:
            started = time.monotonic()
            with pytest.raises(KeycapError) as info:
                await ledger.write_with_capability("cap", key="k", payload=b"x")
            elapsed = time.monotonic() - started
        assert info.value.code == grpc.StatusCode.UNAVAILABLE
        assert flaky.calls >= 3  # it did retry...
        assert elapsed < 1.5  # ...and never slept past the deadline

    asyncio.run(scenario())


def test_the_backoff_sleeps_without_blocking_the_event_loop(port: int) -> None:
    flaky = FlakyLedger(failures=3)  # backoffs of at least 0.05 + 0.1 + 0.2 s

    async def scenario() -> None:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        async with serving(port, flaky) as address, AsyncLedgerClient(address, timeout=10) as ledger:
            task = asyncio.create_task(ticker())
            try:
                await ledger.write_with_capability("cap", key="k", payload=b"x")
            finally:
                task.cancel()
        assert flaky.calls == 4
        assert ticks >= 10, f"the event loop ran only {ticks} ticks during ≥0.35 s of backoff"

    asyncio.run(scenario())


# With retry=False only wait-for-ready can carry the call over the outage: nothing is sent
# before the service is up, so even a single-use write may wait for it.
@pytest.mark.parametrize("retry", [True, False], ids=["retried", "single-use"])
def test_a_call_made_while_the_service_is_down_waits_for_it(port: int, retry: bool) -> None:
    flaky = FlakyLedger(failures=0)

    async def scenario() -> None:
        servers: list[grpc.aio.Server] = []

        async def start_later() -> None:
            await asyncio.sleep(1.0)
            servers.append(await _start(port, flaky))

        starter = asyncio.create_task(start_later())
        try:
            started = time.monotonic()
            async with AsyncLedgerClient(f"127.0.0.1:{port}", timeout=15) as ledger:
                res = await ledger.write_with_capability("cap", key="k", payload=b"x", retry=retry)
            assert res.duplicate is False
            assert time.monotonic() - started >= 0.9  # it really waited for the server
            assert flaky.calls == 1
        finally:
            await starter
            for s in servers:
                await s.stop(None)

    asyncio.run(scenario())
