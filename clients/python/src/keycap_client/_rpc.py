"""Calls a unary method with a deadline and bearer metadata; errors become KeycapError."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, Protocol, TypeVar

import grpc

from keycap_client.errors import CLIENT_ERROR_DOMAIN, KeycapError

_otel_inject: Callable[[dict[str, str]], None] | None
try:  # Optional extra "otel": without it no trace context is sent.
    from opentelemetry import propagate as _otel_propagate

    _otel_inject = _otel_propagate.inject
except ImportError:  # pragma: no cover - exercised by installs without the extra
    _otel_inject = None
from keycap_client.request_rules import check as check_request_rules

Res = TypeVar("Res")

#: Default deadline of every call, in seconds.
DEFAULT_TIMEOUT_S = 10.0


#: Backoff between retries of an UNAVAILABLE answer (seconds): first, and cap.
FIRST_BACKOFF_S = 0.1
MAX_BACKOFF_S = 2.0


#: The largest credential (capability or principal secret) sent. The services refuse
#: anything over 4 KiB with a recorded reason; past ~64 KiB the HTTP/2 layer resets the
#: stream before any handler sees it (a bare INTERNAL, nothing recorded).
MAX_BEARER_BYTES = 16 * 1024


def trace_metadata() -> tuple[tuple[str, str], ...]:
    """The caller's current OpenTelemetry context as W3C ``traceparent``/``tracestate`` metadata.

    Empty without opentelemetry-api (the ``otel`` extra) or outside any span, so the
    kernel's and ledger's spans join the caller's trace only when there is one."""
    if _otel_inject is None:
        return ()
    carrier: dict[str, str] = {}
    _otel_inject(carrier)
    return tuple((k, v) for k, v in carrier.items() if k in ("traceparent", "tracestate"))


def bearer_metadata(bearer: str | None) -> tuple[tuple[str, str], ...] | None:
    """``authorization: Bearer <bearer>`` and the caller's trace context as call metadata;
    None (nothing sent) without either.

    Raises KeycapError INVALID_ARGUMENT ``CAPABILITY_TOO_LARGE`` (nothing sent) for a
    credential over MAX_BEARER_BYTES."""
    traced = trace_metadata()
    if bearer is None:
        return traced or None
    size = len(bearer.encode("utf-8", "surrogatepass"))
    if size > MAX_BEARER_BYTES:
        raise KeycapError(
            grpc.StatusCode.INVALID_ARGUMENT,
            "CAPABILITY_TOO_LARGE",
            f"the credential is {size} bytes; keycap credentials are at most 4096 bytes, "
            f"and this client sends none over {MAX_BEARER_BYTES} (not sent)",
            domain=CLIENT_ERROR_DOMAIN,
        )
    return (("authorization", f"Bearer {bearer}"), *traced)


def deadline_after(timeout: float | None) -> float | None:
    """The monotonic deadline ``timeout`` seconds from now (None: no deadline)."""
    return None if timeout is None else time.monotonic() + timeout


def time_left(deadline: float | None) -> float | None:
    """Seconds left until ``deadline`` (never negative), the next attempt's timeout."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def retry_delay(error: KeycapError, *, attempt: int, deadline: float | None, retry: bool) -> float | None:
    """How long to wait before trying a failed call again; None: do not, raise ``error``.

    Only an UNAVAILABLE answer (keycap's "retry") is retried, and only when ``retry``;
    the backoff doubles from FIRST_BACKOFF_S per ``attempt`` (0 for the first retry),
    capped at MAX_BACKOFF_S, jittered to 50-100 %, and never sleeps past the deadline.
    """
    if error.code != grpc.StatusCode.UNAVAILABLE or not retry:
        return None
    backoff: float = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2**attempt) * (0.5 + random.random() / 2)
    if deadline is not None and time.monotonic() + backoff >= deadline:
        return None
    return backoff


def call_unary(
    method: Callable[..., Any],
    request: Any,
    *,
    bearer: str | None,
    timeout: float | None,
    retry: bool = True,
) -> Any:
    """Invokes ``method`` (a generated stub's multicallable).

    First the request's rules (``proto/``'s protovalidate annotations) are checked: a
    request that breaks one is refused with the reason the kernel would give, and nothing
    is sent (:mod:`keycap_client.request_rules`). ``bearer`` (when not None) is sent as ``authorization: Bearer <bearer>``;
    ``timeout`` is the deadline in seconds from now, retries included. The call waits
    for the channel to be ready (a service restarting within the deadline is waited
    for, nothing is sent before it is up), and an UNAVAILABLE answer — keycap's
    "retry" — is retried with capped, jittered exponential backoff until the deadline,
    unless ``retry`` is False (a single-use capability's write, where a lost answer
    makes a retry ambiguous). The asyncio twin is ``keycap_client.aio._rpc.call_unary``.
    """
    check_request_rules(request)
    metadata = bearer_metadata(bearer)
    deadline = deadline_after(timeout)
    attempt = 0
    while True:
        try:
            return method(request, timeout=time_left(deadline), metadata=metadata, wait_for_ready=True)
        except grpc.RpcError as err:
            error = KeycapError.from_rpc_error(err)
            delay = retry_delay(error, attempt=attempt, deadline=deadline, retry=retry)
            if delay is None:
                raise error from err
            time.sleep(delay)
            attempt += 1


class Page(Protocol):
    """A List* response: one page of items and the token of the next ("" after the last)."""

    @property
    def next_page_token(self) -> str: ...


PageT = TypeVar("PageT", bound=Page)
Item = TypeVar("Item")

#: Page size of the listings that follow every page to the end.
LIST_PAGE_SIZE = 1000


def collect_pages(fetch: Callable[[str], PageT], items: Callable[[PageT], Iterable[Item]]) -> list[Item]:
    """Every item of a paged listing: ``fetch(page_token)`` from "" until no next token."""
    out: list[Item] = []
    token = ""
    while True:
        page = fetch(token)
        out.extend(items(page))
        token = page.next_page_token
        if not token:
            return out


def open_channel(address: str, credentials: grpc.ChannelCredentials | None) -> grpc.Channel:
    """An insecure channel (loopback default) or a secure one with ``credentials``."""
    if credentials is None:
        return grpc.insecure_channel(address)
    return grpc.secure_channel(address, credentials)


def client_error(reason: str, message: str) -> KeycapError:
    """A KeycapError raised by the client itself (misuse), never by a server."""
    return KeycapError(grpc.StatusCode.FAILED_PRECONDITION, reason, message, domain=CLIENT_ERROR_DOMAIN)


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
