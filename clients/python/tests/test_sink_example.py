"""The mailer example (examples/mailer_sink.py) as a user runs it: a runtime begins
`mail.send` calls in the real kernel and posts the messages to the mailer under uvicorn."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pymongo
import pytest

from conftest import Stack
from keycap_client import KernelClient
from keycap_client.sink import KernelJwksSource, MongoRefusalRecorder, Sink
from mailer_sink import MAIL_SEND, Outbox, build_app
from sink_support import cli_rejections, http_request, serve_asgi, tampered


@pytest.fixture
def mailer(stack: Stack, kernel: KernelClient) -> Iterator[tuple[str, Outbox, MongoRefusalRecorder]]:
    kernel.register_tool(MAIL_SEND)
    client: pymongo.MongoClient[Any] = pymongo.MongoClient(stack.mongodb_uri, serverSelectionTimeoutMS=5000)
    recorder = MongoRefusalRecorder(client[stack.mongodb_database], service="sink:mailer")
    keys = KernelJwksSource.from_kernel(stack.kernel)
    outbox = Outbox()
    with serve_asgi(build_app(Sink("mailer", tools=[MAIL_SEND.id], keys=keys, refusals=recorder), outbox)) as base:
        yield base, outbox, recorder
    recorder.close()
    keys.close()
    client.close()


def send_mail(base: str, capability: str, mail: dict[str, str]) -> Any:
    headers = {"authorization": f"Bearer {capability}", "content-type": "application/json"}
    return http_request(base, "POST", "/messages", headers, json.dumps(mail).encode())


def test_the_mailer_sends_one_message_per_kernel_key_and_refuses_forgeries(
    stack: Stack, kernel: KernelClient, mailer: tuple[str, Outbox, MongoRefusalRecorder]
) -> None:
    base, outbox, recorder = mailer
    mail = {"to": "ops@example.com", "subject": "disk 91% full", "body": "on db-2"}
    first = kernel.begin_call(MAIL_SEND.id, json.dumps(mail))
    retry = kernel.begin_call(MAIL_SEND.id, json.dumps({**mail, "body": "on db-2 (again)"}))

    sent = send_mail(base, first.capability, mail)
    again = send_mail(base, retry.capability, {**mail, "body": "on db-2 (again)"})

    assert sent.status == 201 and sent.json()["message_id"] == f"<{first.call.key}@mailer.keycap>"
    assert again.status == 200 and again.json() == {**sent.json(), "duplicate": True, "call_id": retry.call.call_id}
    assert list(outbox.sent.values()) == [mail]

    forged = send_mail(base, tampered(first.capability, key="Zm9yZ2Vk"), {**mail, "to": "attacker@example.com"})
    assert (forged.status, forged.json()["reason"]) == (401, "BAD_SIGNATURE")
    assert len(outbox.sent) == 1
    assert http_request(base, "GET", "/healthz").status == 404  # exempt from the capability, not a route

    recorder.close()
    records = cli_rejections(stack, "sink:mailer")
    assert [(r["reason"], r["method"]) for r in records] == [("BAD_SIGNATURE", "HTTP POST /messages")]
