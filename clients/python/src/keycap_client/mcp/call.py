"""What a governed tool's handler learns about its call: the verified capability and the
value to pass on as its own downstream ``Idempotency-Key``."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

from keycap_client.sink.claims import VerifiedCapability

__all__ = ["GovernedCall", "current_call", "idempotency_key"]


@dataclass(frozen=True)
class GovernedCall:
    """A ``tools/call`` the middleware admitted.

    ``tool_name``: the MCP tool name called; ``tool_id``: its keycap tool id;
    ``capability``: the verified claims (never the raw token, a bearer credential).
    For an Idempotent call ``capability.key`` is the kernel's key, and the middleware has
    derived it again from the arguments this server received.
    """

    tool_name: str
    tool_id: str
    capability: VerifiedCapability

    @property
    def idempotency_key(self) -> str | None:
        """The value that makes the handler's own effect single across retries: the key
        (Idempotent), the request id (Queryable), None for an Unsafe call (spent once here)."""
        return self.capability.key if self.capability.key is not None else self.capability.request_id


_current: ContextVar[GovernedCall | None] = ContextVar("keycap_mcp_call", default=None)


def current_call() -> GovernedCall:
    """The governed call being handled; LookupError outside a handler the middleware admitted
    (an ungoverned tool, or code not running under the middleware)."""
    call = _current.get()
    if call is None:
        raise LookupError("no governed keycap call: not inside a tools/call admitted by KeycapMcpMiddleware")
    return call


def idempotency_key() -> str:
    """The current call's key (or request id), to send downstream as ``Idempotency-Key``;
    LookupError outside a governed call, or for an Unsafe one (it has neither)."""
    key = current_call().idempotency_key
    if key is None:
        raise LookupError("this call is Unsafe: it has no idempotency key (the middleware spent its capability once)")
    return key
