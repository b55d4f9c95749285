"""The blocking runtime of the client core: makes the calls a flow asks for, one after another.

Everything but the waiting is :mod:`keycap_client._core` (the request's rules, metadata,
deadline, retry decision, requests, paging, results); this module calls the stub and
sleeps between tries. The asyncio twin is :mod:`keycap_client.aio._rpc`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

import grpc

from keycap_client._core.call import Attempts, Flow
from keycap_client._core.reach import Endpoint

T = TypeVar("T")
Stub = TypeVar("Stub")


def call_unary(
    method: Callable[..., Any],
    request: Any,
    *,
    bearer: str | None,
    timeout: float | None,
    retry: bool = True,
    endpoint: Endpoint | None = None,
) -> Any:
    """Invokes ``method`` (a generated stub's multicallable) under the core's call policy
    (:class:`keycap_client._core.call.Attempts`): the request's rules checked first,
    ``authorization: Bearer <bearer>`` (when not None), one deadline ``timeout`` seconds
    from now for every try, wait-for-ready, and an UNAVAILABLE answer retried with capped,
    jittered exponential backoff (``time.sleep``) until the deadline unless ``retry`` is False.
    """
    attempts = Attempts(request, bearer=bearer, timeout=timeout, retry=retry, endpoint=endpoint)
    while True:
        try:
            return method(request, **attempts.options())
        except grpc.RpcError as err:
            time.sleep(attempts.backoff(err))


def run(flow: Flow[T], stub: Any, timeout: float | None, endpoint: Endpoint | None = None) -> T:
    """Runs ``flow`` to its result, making each call it yields on ``stub`` (at ``endpoint``) with :func:`call_unary`."""
    res: Any = None
    while True:
        try:
            rpc = flow.send(res)
        except StopIteration as done:
            result: T = done.value
            return result
        method = getattr(stub, rpc.method)
        res = call_unary(method, rpc.request, bearer=rpc.bearer, timeout=timeout, retry=rpc.retry, endpoint=endpoint)


def open_channel(address: str, credentials: grpc.ChannelCredentials | None) -> grpc.Channel:
    """An insecure channel (loopback default) or a secure one with ``credentials``."""
    if credentials is None:
        return grpc.insecure_channel(address)
    return grpc.secure_channel(address, credentials)


_Client = TypeVar("_Client", bound="ChannelClient")


class ChannelClient:
    """Owns one gRPC channel and its stub; closes it on ``close()`` or at the end of a ``with`` block."""

    address: str
    timeout: float
    _channel: grpc.Channel
    _stub: Any
    _endpoint: Endpoint

    def _connect(
        self, address: str, credentials: grpc.ChannelCredentials | None, timeout: float, stub: Callable[[grpc.Channel], Stub]
    ) -> Stub:
        self.address = address
        self.timeout = timeout
        self._channel = open_channel(address, credentials)
        made = stub(self._channel)
        self._stub = made
        self._endpoint = Endpoint(getattr(stub, "__name__", ""), address, self._connected)
        return made

    def _connected(self) -> bool | None:
        """Whether the channel is connected now; None when grpcio does not say (its sync
        channel has no public probe that does not wait)."""
        probe = getattr(getattr(self._channel, "_channel", None), "check_connectivity_state", None)
        if not callable(probe):
            return None
        try:
            return bool(probe(False) == grpc.ChannelConnectivity.READY.value[0])
        except Exception:  # a grpcio without the probe: unknown, never a failure of its own
            return None

    def _run(self, flow: Flow[T], timeout: float | None) -> T:
        """``flow``'s result; ``timeout`` None is the client's own."""
        return run(flow, self._stub, self.timeout if timeout is None else timeout, self._endpoint)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self: _Client) -> _Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
