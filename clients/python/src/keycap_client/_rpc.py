"""Calls a unary method with a deadline and bearer metadata; errors become KeycapError."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

import grpc

from keycap_client.errors import KeycapError

Res = TypeVar("Res")

#: Default deadline of every call, in seconds.
DEFAULT_TIMEOUT_S = 10.0


def call_unary(
    method: Callable[..., Any],
    request: Any,
    *,
    bearer: str | None,
    timeout: float | None,
) -> Any:
    """Invokes ``method`` (a generated stub's multicallable) once.

    ``bearer`` (when not None) is sent as ``authorization: Bearer <bearer>``;
    ``timeout`` is the deadline in seconds from now.
    """
    metadata = (("authorization", f"Bearer {bearer}"),) if bearer is not None else None
    try:
        return method(request, timeout=timeout, metadata=metadata)
    except grpc.RpcError as err:
        raise KeycapError.from_rpc_error(err) from err


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
