"""The call policy every keycap client follows, without a transport.

A client operation is a :data:`Flow`: a generator that yields each unary call it needs as
an :class:`Rpc`, is sent that call's response, and returns the operation's result (a
listing yields one Rpc a page). A runtime drives it: ``keycap_client._rpc.run`` blocks on
each call, ``keycap_client.aio._rpc.run`` awaits it. Both make every call the same way,
with :class:`Attempts`: the request's rules checked first (nothing is sent when one fails),
``authorization: Bearer`` and trace metadata, one deadline for every try, and an
UNAVAILABLE answer retried with capped, jittered exponential backoff within it. The
runtimes differ only in how they wait (``time.sleep`` or ``asyncio.sleep``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, TypeVar

import grpc
from google.protobuf.message import Message

from keycap_client._core.reach import Endpoint, explain
from keycap_client.errors import CLIENT_ERROR_DOMAIN, KeycapError
from keycap_client.request_rules import check as check_request_rules

_otel_inject: Callable[[dict[str, str]], None] | None
try:  # Optional extra "otel": without it no trace context is sent.
    from opentelemetry import propagate as _otel_propagate

    _otel_inject = _otel_propagate.inject
except ImportError:  # pragma: no cover - exercised by installs without the extra
    _otel_inject = None

T = TypeVar("T")

#: Default deadline of every call, in seconds.
DEFAULT_TIMEOUT_S = 10.0

#: Backoff between retries of an UNAVAILABLE answer (seconds): first, and cap.
FIRST_BACKOFF_S = 0.1
MAX_BACKOFF_S = 2.0

#: The largest credential (capability or principal secret) sent. The services refuse
#: anything over 4 KiB with a recorded reason; past ~64 KiB the HTTP/2 layer resets the
#: stream before any handler sees it (a bare INTERNAL, nothing recorded).
MAX_BEARER_BYTES = 16 * 1024

#: Page size of the listings that follow every page to the end.
LIST_PAGE_SIZE = 1000


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


class Attempts:
    """The tries of one unary call, decided here and made by a runtime.

    Made before the first try: the request's rules (``proto/``'s protovalidate
    annotations) are checked, and a request that breaks one is refused with the reason
    the kernel would give, nothing sent (:mod:`keycap_client.request_rules`); an oversized
    ``bearer`` is refused too. :meth:`options` are the keyword arguments of each try
    (the time left of one deadline ``timeout`` seconds from now, the metadata,
    wait-for-ready: a service restarting within the deadline is waited for);
    :meth:`backoff` turns a failed try into the wait before the next one, or raises it
    as a :class:`KeycapError` (anything but UNAVAILABLE, past the deadline, or when
    ``retry`` is False: a single-use capability's write, where a lost answer makes a
    retry ambiguous). Given the ``endpoint`` called, the raised error says what would fix
    it where the client knows (:func:`keycap_client._core.reach.explain`: the service's
    address and setting when it could not be reached, where the credential lookup looked).
    """

    __slots__ = ("_metadata", "_deadline", "_retry", "_attempt", "_timeout", "_bearer_sent", "_endpoint")

    def __init__(
        self,
        request: Message,
        *,
        bearer: str | None,
        timeout: float | None,
        retry: bool = True,
        endpoint: Endpoint | None = None,
    ) -> None:
        check_request_rules(request)
        self._metadata = bearer_metadata(bearer)
        self._deadline = deadline_after(timeout)
        self._retry = retry
        self._attempt = 0
        self._timeout = timeout
        self._bearer_sent = bearer is not None
        self._endpoint = endpoint

    def options(self) -> dict[str, Any]:
        """The keyword arguments of the next try of a generated stub's multicallable."""
        return {"timeout": time_left(self._deadline), "metadata": self._metadata, "wait_for_ready": True}

    def backoff(self, err: grpc.RpcError) -> float:
        """Seconds to wait before trying again after ``err``; raises ``err`` as a KeycapError
        (with ``err`` as its cause) when it is not to be tried again."""
        error = KeycapError.from_rpc_error(err)
        delay = retry_delay(error, attempt=self._attempt, deadline=self._deadline, retry=self._retry)
        if delay is None:
            raise explain(error, self._endpoint, timeout=self._timeout, bearer_sent=self._bearer_sent) from err
        self._attempt += 1
        return delay


@dataclass(frozen=True)
class Rpc:
    """One unary call a flow needs: the stub method's name, the request, the bearer sent
    with it (never in ``repr``), and whether an UNAVAILABLE answer may be retried."""

    method: str
    request: Message
    bearer: str | None = field(repr=False)
    retry: bool = True


#: A client operation: yields the :class:`Rpc` s it needs, is sent each one's response,
#: returns the operation's result.
Flow: TypeAlias = Generator[Rpc, Any, T]


class Page(Protocol):
    """A List* response: one page of items and the token of the next ("" after the last)."""

    @property
    def next_page_token(self) -> str: ...


PageT = TypeVar("PageT", bound=Page)
Item = TypeVar("Item")


def collect_pages(fetch: Callable[[str], Flow[PageT]], items: Callable[[PageT], Iterable[Item]]) -> Flow[list[Item]]:
    """Every item of a paged listing: the pages of ``fetch(page_token)`` from "" until no next token."""
    out: list[Item] = []
    token = ""
    while True:
        page = yield from fetch(token)
        out.extend(items(page))
        token = page.next_page_token
        if not token:
            return out


class ClientCore:
    """A client without its channel: the bearer every call of it carries (no accessor)."""

    __slots__ = ("__bearer",)

    def __init__(self, bearer: str | None) -> None:
        self.__bearer = bearer

    def _unary(self, method: str, request: Message) -> Flow[Any]:
        """The flow of one call of ``method`` with the client's bearer: its response."""
        res = yield Rpc(method, request, self.__bearer)
        return res


def client_error(reason: str, message: str) -> KeycapError:
    """A KeycapError raised by the client itself (misuse), never by a server."""
    return KeycapError(grpc.StatusCode.FAILED_PRECONDITION, reason, message, domain=CLIENT_ERROR_DOMAIN)
