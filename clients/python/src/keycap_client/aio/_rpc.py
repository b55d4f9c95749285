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

from keycap_client._core.call import Attempts, Flow
from keycap_client._core.reach import Endpoint

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


async def run(flow: Flow[T], stub: Any, timeout: float | None, endpoint: Endpoint | None = None) -> T:
    """Runs ``flow`` to its result, awaiting each call it yields on ``stub`` (at ``endpoint``) with :func:`call_unary`."""
    res: Any = None
    while True:
        try:
            rpc = flow.send(res)
        except StopIteration as done:
            result: T = done.value
            return result
        res = await call_unary(
            getattr(stub, rpc.method), rpc.request, bearer=rpc.bearer, timeout=timeout, retry=rpc.retry, endpoint=endpoint
        )


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

    async def _run(self, flow: Flow[T], timeout: float | None) -> T:
        """``flow``'s result; ``timeout`` None is the client's own."""
        return await run(flow, self._stub, self.timeout if timeout is None else timeout, self._endpoint)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self: _Client) -> _Client:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
