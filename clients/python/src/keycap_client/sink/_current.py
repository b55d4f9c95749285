"""The capability admitted for the request being handled (set by the transports)."""

from __future__ import annotations

from contextvars import ContextVar

from keycap_client.sink.claims import VerifiedCapability

current: ContextVar[VerifiedCapability | None] = ContextVar("keycap_capability", default=None)


def current_capability() -> VerifiedCapability:
    """The verified capability of the request this code is handling (inside a handler
    behind a keycap sink interceptor or middleware); LookupError outside one."""
    cap = current.get()
    if cap is None:
        raise LookupError("no keycap capability: not inside a request admitted by a keycap sink")
    return cap
