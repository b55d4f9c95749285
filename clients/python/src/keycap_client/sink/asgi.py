"""ASGI middleware that makes an HTTP service a sink (ADR 0013 §1, §8).

Each request is admitted under ``Authorization: Bearer <capability>`` (or the configured
header, whose value is the bare token or ``Bearer <token>``) and its ``Idempotency-Key``
header, if any, before the app runs; refusals are answered 401 / 403 / 503 (with
``Retry-After: 1``) as ``application/problem+json`` (RFC 9457). The app reads the claims
from ``scope["keycap.capability"]`` (:func:`capability_from_scope`) or
:func:`~keycap_client.sink.current_capability`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

import grpc

from keycap_client.sink import _current
from keycap_client.sink.claims import VerifiedCapability
from keycap_client.sink.refusal import SinkRefusal
from keycap_client.sink.sink import AdmissionContext, Sink

__all__ = ["SinkMiddleware", "capability_from_scope", "problem_json", "SCOPE_KEY", "HTTP_STATUS"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Where the middleware puts the verified capability in the ASGI scope.
SCOPE_KEY = "keycap.capability"
#: HTTP status of a refusal, by gRPC code.
HTTP_STATUS = {
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAVAILABLE: 503,
}


def capability_from_scope(scope: Scope) -> VerifiedCapability:
    """The verified capability of an admitted request (``request.scope`` in Starlette)."""
    cap = scope.get(SCOPE_KEY)
    if not isinstance(cap, VerifiedCapability):
        raise LookupError("no keycap capability in this scope: the request did not pass a keycap SinkMiddleware")
    return cap


def problem_json(err: SinkRefusal) -> tuple[int, bytes]:
    """The HTTP status and RFC 9457 body of a refusal (the ADR's shape)."""
    status = HTTP_STATUS.get(err.code, 500)
    body = {
        "type": f"https://keycap.dev/reasons/{err.reason}",
        "title": err.reason,
        "status": status,
        "detail": err.message,
        "reason": err.reason,
        "retryable": err.retryable,
    }
    return status, json.dumps(body, separators=(",", ":")).encode("utf-8")


class SinkMiddleware:
    """Wraps an ASGI app: ``app = SinkMiddleware(app, sink)``.

    ``header``: where the capability travels (default ``authorization``; a service whose
    ``Authorization`` carries its own users' credentials names another, e.g.
    ``keycap-capability``). ``exempt_paths``: paths served without a capability (health
    checks). Lifespan events pass through.
    """

    def __init__(self, app: App, sink: Sink, *, header: str = "authorization", exempt_paths: Iterable[str] = ()) -> None:
        self.app = app
        self.sink = sink
        self.header = header.lower().encode("latin-1")
        self.exempt_paths = frozenset(exempt_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get("path") in self.exempt_paths:
            await self.app(scope, receive, send)
            return
        authorization: str | None = None
        idempotency_key: str | None = None
        for name, value in scope.get("headers") or ():
            if name == self.header and authorization is None:
                authorization = value.decode("latin-1")
            elif name == b"idempotency-key" and idempotency_key is None:
                idempotency_key = value.decode("latin-1")
        if authorization is not None and self.header != b"authorization":
            authorization = _as_bearer(authorization)
        client = scope.get("client")
        peer = _peer(client) if client else "unknown"
        method = scope.get("method", "WEBSOCKET") if scope["type"] == "http" else "WEBSOCKET"
        admission = AdmissionContext(f"HTTP {method} {scope.get('path', '')}", peer, idempotency_key)
        try:
            cap = await self.sink.admit_async(authorization, admission)
        except SinkRefusal as err:
            await _refuse(scope, send, err)
            return
        token = _current.current.set(cap)
        try:
            await self.app({**scope, SCOPE_KEY: cap}, receive, send)
        finally:
            _current.current.reset(token)


def _as_bearer(value: str) -> str:
    # A custom header may carry the bare token: the verifier reads the Bearer form.
    v = value.strip(" \t")
    if v == "" or v[:7].lower() == "bearer ":
        return value
    return f"Bearer {v}"


def _peer(client: Any) -> str:
    host, port = client[0], client[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


async def _refuse(scope: Scope, send: Send, err: SinkRefusal) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": err.reason})
        return
    status, body = problem_json(err)
    headers = [(b"content-type", b"application/problem+json"), (b"content-length", str(len(body)).encode())]
    if err.retryable:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
