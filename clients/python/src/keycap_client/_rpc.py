"""Calls a unary method with a deadline and bearer metadata; errors become KeycapError."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

import grpc

from keycap_client.errors import KeycapError

Res = TypeVar("Res")

#: Default deadline of every call, in seconds.
DEFAULT_TIMEOUT_S = 10.0


#: Backoff between retries of an UNAVAILABLE answer (seconds): first, and cap.
FIRST_BACKOFF_S = 0.1
MAX_BACKOFF_S = 2.0


def call_unary(
    method: Callable[..., Any],
    request: Any,
    *,
    bearer: str | None,
    timeout: float | None,
    retry: bool = True,
) -> Any:
    """Invokes ``method`` (a generated stub's multicallable).

    ``bearer`` (when not None) is sent as ``authorization: Bearer <bearer>``;
    ``timeout`` is the deadline in seconds from now, retries included. The call waits
    for the channel to be ready (a service restarting within the deadline is waited
    for, nothing is sent before it is up), and an UNAVAILABLE answer — keycap's
    "retry" — is retried with capped, jittered exponential backoff until the deadline,
    unless ``retry`` is False (a single-use capability's write, where a lost answer
    makes a retry ambiguous).
    """
    metadata = (("authorization", f"Bearer {bearer}"),) if bearer is not None else None
    deadline = None if timeout is None else time.monotonic() + timeout
    attempt = 0
    while True:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return method(request, timeout=remaining, metadata=metadata, wait_for_ready=True)
        except grpc.RpcError as err:
            error = KeycapError.from_rpc_error(err)
            if error.code != grpc.StatusCode.UNAVAILABLE or not retry:
                raise error from err
            backoff = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2**attempt) * (0.5 + random.random() / 2)
            if deadline is not None and time.monotonic() + backoff >= deadline:
                raise error from err
            time.sleep(backoff)
            attempt += 1


def open_channel(address: str, credentials: grpc.ChannelCredentials | None) -> grpc.Channel:
    """An insecure channel (loopback default) or a secure one with ``credentials``."""
    if credentials is None:
        return grpc.insecure_channel(address)
    return grpc.secure_channel(address, credentials)


def client_error(reason: str, message: str) -> KeycapError:
    """A KeycapError raised by the client itself (misuse), never by a server."""
    return KeycapError(grpc.StatusCode.FAILED_PRECONDITION, reason, message, domain="keycap.dev/client")


_Client = TypeVar("_Client", bound="ChannelClient")


class ChannelClient:
    """Owns one gRPC channel; closes it on ``close()`` or at the end of a ``with`` block."""

    _channel: grpc.Channel

    def close(self) -> None:
        self._channel.close()

    def __enter__(self: _Client) -> _Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
