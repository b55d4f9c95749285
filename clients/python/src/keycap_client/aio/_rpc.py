"""The asyncio runtime of the client core: the twin of :mod:`keycap_client._rpc` over ``grpc.aio``.

Only the waiting differs (``await`` the call, ``asyncio.sleep`` between tries); the call
policy, requests, paging and results are :mod:`keycap_client._core`'s, as for the sync clients.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

import grpc
import grpc.aio

from keycap_client._core import batching
from keycap_client._core.call import DEFAULT_TIMEOUT_S, Attempts, Flow, Rpc
from keycap_client._core.reach import Endpoint
from keycap_client.errors import KeycapError
from keycap_client.request_rules import check as check_request_rules

T = TypeVar("T")
Stub = TypeVar("Stub")


async def call_unary(
    method: Callable[..., Any],
    request: Any,
    *,
    bearer: str | None,
    timeout: float | None,
    retry: bool = True,
    endpoint: Endpoint | None = None,
) -> Any:
    """Awaits ``method`` (a generated stub's multicallable on a ``grpc.aio`` channel) under
    :func:`keycap_client._rpc.call_unary`'s policy; between tries it sleeps with
    ``asyncio.sleep``: the event loop keeps running.
    """
    attempts = Attempts(request, bearer=bearer, timeout=timeout, retry=retry, endpoint=endpoint)
    while True:
        try:
            return await method(request, **attempts.options())
        except grpc.RpcError as err:
            await asyncio.sleep(attempts.backoff(err))


async def run(flow: Flow[T], stub: Any, timeout: float | None, endpoint: Endpoint | None = None, batcher: AsyncBatcher | None = None) -> T:
    """Runs ``flow`` to its result, awaiting each call it yields on ``stub`` (at ``endpoint``) with
    :func:`call_unary`; BeginCall and CompleteCall through ``batcher`` when there is one."""
    res: Any = None
    while True:
        try:
            rpc = flow.send(res)
        except StopIteration as done:
            result: T = done.value
            return result
        if batcher is not None and batching.batchable(rpc):
            res = await batcher.call(rpc, timeout)
            continue
        res = await call_unary(
            getattr(stub, rpc.method), rpc.request, bearer=rpc.bearer, timeout=timeout, retry=rpc.retry, endpoint=endpoint
        )


class _Waiting:
    __slots__ = ("rpc", "timeout", "answer")

    def __init__(self, rpc: Rpc, timeout: float | None) -> None:
        self.rpc = rpc
        self.timeout = timeout
        self.answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()


class AsyncBatcher:
    """The asyncio twin of :class:`keycap_client._rpc.Batcher`: the BeginCalls and
    CompleteCalls of concurrent tasks go together (ADR 0022), each answered as if alone; a
    batch is sent by a task of its own."""

    def __init__(self, stub: Any, endpoint: Endpoint | None, timeout: float) -> None:
        self._stub = stub
        self._endpoint = endpoint
        self._timeout = timeout
        self._queues: dict[str, batching.BatchQueue[_Waiting]] = {m: batching.BatchQueue() for m in batching.BATCHED}
        self._unsupported = False
        #: Completion receipts for the next BeginCalls (ADR 0035).
        self.receipts = batching.Receipts()
        self._tasks: set[asyncio.Task[None]] = set()

    async def call(self, rpc: Rpc, timeout: float | None) -> Any:
        if self._unsupported:
            return await self._alone(rpc, timeout)
        check_request_rules(rpc.request)  # a request that breaks a rule is refused alone, batch or not
        w = _Waiting(rpc, timeout)
        if self._queues[rpc.method].arrive(w):
            try:
                return await self._alone(rpc, timeout)
            finally:
                self._next(rpc.method)
        try:
            # shield: a caller giving up does not cancel the answer the batch will set.
            return await asyncio.wait_for(asyncio.shield(w.answer), DEFAULT_TIMEOUT_S if timeout is None else timeout)
        except asyncio.TimeoutError:
            raise KeycapError(grpc.StatusCode.DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED", f"{rpc.method} waited past its deadline for the batch ahead of it") from None

    async def _alone(self, rpc: Rpc, timeout: float | None) -> Any:
        return await call_unary(getattr(self._stub, rpc.method), rpc.request, bearer=rpc.bearer, timeout=timeout, retry=rpc.retry, endpoint=self._endpoint)

    def _next(self, method: str) -> None:
        batch = self._queues[method].next_batch()
        if batch:
            task = asyncio.get_running_loop().create_task(self._send_then_next(method, batch))
            self._tasks.add(task)  # held until done: the loop keeps only weak references
            task.add_done_callback(self._tasks.discard)

    async def _send_then_next(self, method: str, batch: list[_Waiting]) -> None:
        try:
            await self._send(method, batch)
        finally:
            self._next(method)

    async def _send(self, method: str, batch: list[_Waiting]) -> None:
        if len(batch) == 1 or self._unsupported:
            return await self._each_alone(batch)
        receipts = self.receipts.take() if method == "BeginCall" else []
        bearers = [w.rpc.bearer for w in batch]
        name, request = batching.batch_request(method, [w.rpc.request for w in batch], receipts, bearers)
        try:
            response = await call_unary(getattr(self._stub, name), request, bearer=batching.batch_bearer(method, bearers), timeout=self._timeout, endpoint=self._endpoint)
        except KeycapError as err:
            then = batching.after_batch_refused(err)
            self._unsupported = self._unsupported or then == "unsupported"
            if then == "fail":
                return _settle([(w, err) for w in batch])
            return await self._each_alone(batch)
        except Exception as err:  # anything else is every call's answer, never a hang
            return _settle([(w, err) for w in batch])
        answers = batching.answers_of(method, response, len(batch))
        _settle([(w, a) for w, a in zip(batch, answers) if not batching.retry_alone(a)])
        await self._each_alone([w for w, a in zip(batch, answers) if batching.retry_alone(a)])

    async def _each_alone(self, batch: list[_Waiting]) -> None:
        await asyncio.gather(*(self._answer_alone(w) for w in batch))

    async def _answer_alone(self, w: _Waiting) -> None:
        try:
            answer: Any = await self._alone(w.rpc, w.timeout)
        except Exception as err:
            answer = err
        _settle([(w, answer)])


def _settle(answers: list[tuple[_Waiting, Any]]) -> None:
    for w, a in answers:
        if w.answer.done():
            continue
        if isinstance(a, BaseException):
            w.answer.set_exception(a)
        else:
            w.answer.set_result(a)


def open_channel(address: str, credentials: grpc.ChannelCredentials | None) -> grpc.aio.Channel:
    """An insecure ``grpc.aio`` channel (loopback default) or a secure one with ``credentials``.

    The channel belongs to the running event loop: make clients inside it.
    """
    if credentials is None:
        return grpc.aio.insecure_channel(address)
    return grpc.aio.secure_channel(address, credentials)


_Client = TypeVar("_Client", bound="AsyncChannelClient")


class AsyncChannelClient:
    """Owns one ``grpc.aio`` channel and its stub; closes it on ``await close()`` or at the end of an ``async with`` block."""

    address: str
    timeout: float
    _channel: grpc.aio.Channel
    _stub: Any
    _endpoint: Endpoint

    def _connect(
        self,
        address: str,
        credentials: grpc.ChannelCredentials | None,
        timeout: float,
        stub: Callable[[grpc.aio.Channel], Stub],
    ) -> Stub:
        self.address = address
        self.timeout = timeout
        self._channel = open_channel(address, credentials)
        made = stub(self._channel)
        self._stub = made
        self._endpoint = Endpoint(getattr(stub, "__name__", ""), address, self._connected)
        return made

    def _connected(self) -> bool:
        """Whether the channel is connected now."""
        return self._channel.get_state(try_to_connect=False) == grpc.ChannelConnectivity.READY

    _batcher: AsyncBatcher | None = None

    async def _run(self, flow: Flow[T], timeout: float | None) -> T:
        """``flow``'s result; ``timeout`` None is the client's own."""
        return await run(flow, self._stub, self.timeout if timeout is None else timeout, self._endpoint, self._batcher)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self: _Client) -> _Client:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
