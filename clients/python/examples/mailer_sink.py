"""An e-mail sender that only sends under a keycap capability: an enforcing sink.

The agent's runtime begins a call of the tool ``mail.send`` in the kernel (its key is
derived from ``/to`` and ``/subject``), then POSTs the message here with the capability
in ``Authorization: Bearer``. The mailer admits the request through keycap's sink SDK
and uses the capability's key as the message's own ``Message-ID``: a retry of the same
call, or a second call with the same recipient and subject, is the same message, sent
once. A forged, expired or other tool's capability is refused (401/403, problem+json)
and listed by ``keycap rejections --service sink:mailer``.

    uvicorn --factory examples.mailer_sink:app_from_env

Settings: ``KEYCAP_KERNEL_ADDRESS`` (default 127.0.0.1:50051) for the kernel's keys,
``MONGODB_URI`` / ``KEYCAP_MONGODB_DATABASE`` (as keycap reads them) (keycap's database, default
``mongodb://127.0.0.1:27017`` / ``keycap``) for refusal records.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import pymongo

from keycap_client import Idempotent, KeyDerivation, ToolDefinition
from keycap_client.sink import KernelJwksSource, MongoRefusalRecorder, Sink, SinkMiddleware, capability_from_scope

#: The tool this mailer serves; its key is one per recipient and subject.
MAIL_SEND = ToolDefinition("mail.send", Idempotent(KeyDerivation(["/to", "/subject"])))

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


@dataclass
class Outbox:
    """Where sent mail goes (a real mailer hands it to SMTP); one message per Message-ID."""

    sent: dict[str, dict[str, str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, message_id: str, to: str, subject: str, body: str) -> bool:
        """True when sent now, False when this Message-ID was sent before."""
        with self._lock:
            if message_id in self.sent:
                return False
            self.sent[message_id] = {"to": to, "subject": subject, "body": body}
            return True


def mailer(outbox: Outbox) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The mail service itself: it never sees an unverified request."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if (scope["method"], scope["path"]) != ("POST", "/messages"):
            await _reply(send, 404, {"error": "not found"})
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        mail = json.loads(body)
        cap = capability_from_scope(scope)
        message_id = f"<{cap.key}@mailer.keycap>"  # the kernel-derived key: one message per key
        fresh = outbox.send(message_id, str(mail["to"]), str(mail["subject"]), str(mail.get("body", "")))
        await _reply(send, 201 if fresh else 200, {"message_id": message_id, "duplicate": not fresh, "call_id": cap.call_id})

    return app


async def _reply(send: Send, status: int, doc: dict[str, object]) -> None:
    data = json.dumps(doc).encode()
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": data})


def build_app(sink: Sink, outbox: Outbox) -> SinkMiddleware:
    """The mailer behind keycap: requests without a genuine ``mail.send`` capability never reach it."""
    return SinkMiddleware(mailer(outbox), sink, exempt_paths=["/healthz"])


def app_from_env() -> SinkMiddleware:
    """The mailer as deployed: keys from the kernel, refusals into keycap's database."""
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
        os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27017"), serverSelectionTimeoutMS=2000
    )
    db = client[os.environ.get("KEYCAP_MONGODB_DATABASE", "keycap")]
    sink = Sink(
        "mailer",
        tools=[MAIL_SEND.id],
        keys=KernelJwksSource.from_kernel(os.environ.get("KEYCAP_KERNEL_ADDRESS", "127.0.0.1:50051")),
        refusals=MongoRefusalRecorder(db, service="sink:mailer"),
    )
    return build_app(sink, Outbox())
