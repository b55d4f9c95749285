"""A keycap-aware MCP server: charges an order through a Stripe-like HTTP API, once.

Run it behind ``keycap mcp`` (docs/mcp-server-python.md). The gateway begins each
``charge`` with the kernel, which derives the key from ``order_id`` and ``amount_cents``;
this server verifies the capability that comes with the call, derives the key again from
the arguments it received, and passes it to the API as ``Idempotency-Key``, so the
gateway's retries, its own and the API client's are one charge. A call that reaches this
server without a capability for exactly these arguments (an agent or a host that bypasses
the gateway) is refused before ``charge`` runs, and the refusal is listed by
``keycap rejections --service sink:<name>``.

    python clients/python/examples/mcp_charge_server.py     # MCP on stdio

Settings (environment): ``PAYMENTS_API_URL`` (the API, e.g. ``http://127.0.0.1:8080``);
``KEYCAP_MCP_SERVER_NAME`` (default ``payments``: the gateway's name for this upstream, so
the tools are ``mcp:payments/charge``, and refusals are ``sink:payments``);
``KEYCAP_KERNEL_ADDRESS`` (the kernel's signing keys, default 127.0.0.1:50051);
``MONGODB_URI`` and ``KEYCAP_MONGODB_DATABASE`` (keycap's database: refusals, and
single use of ``send_receipt``'s Unsafe capabilities); ``CHARGE_HANDLER_LOG`` (optional:
a file that gets one line per handler run, which the example's test counts).
"""

from __future__ import annotations

import json
import os
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import pymongo
from pymongo.database import Database
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

from keycap_client.mcp import KeycapMcpMiddleware, current_call, idempotency_key
from keycap_client.sink import KernelJwksSource, MongoRefusalRecorder, MongoSpentStore, PublicKeySource, VerifierOptions


@dataclass(frozen=True)
class Settings:
    name: str
    api_url: str
    keys: PublicKeySource
    mongodb_uri: str
    database: str
    handler_log: str | None = None
    verifier: VerifierOptions = field(default_factory=VerifierOptions)

    @staticmethod
    def from_env() -> Settings:
        return Settings(
            name=os.environ.get("KEYCAP_MCP_SERVER_NAME", "payments"),
            api_url=os.environ["PAYMENTS_API_URL"],
            keys=KernelJwksSource.from_kernel(os.environ.get("KEYCAP_KERNEL_ADDRESS", "127.0.0.1:50051")),
            mongodb_uri=os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27017"),
            database=os.environ.get("KEYCAP_MONGODB_DATABASE", "keycap"),
            handler_log=os.environ.get("CHARGE_HANDLER_LOG"),
        )


def build_server(settings: Settings) -> MCPServer:
    db: Database[Any] = pymongo.MongoClient(settings.mongodb_uri, serverSelectionTimeoutMS=5000)[settings.database]
    server = MCPServer(settings.name)
    # Both tools are governed: keycap's tool ids are mcp:<name>/charge and mcp:<name>/send_receipt.
    KeycapMcpMiddleware(
        settings.name,
        tools=["charge", "send_receipt"],
        keys=settings.keys,
        verifier=settings.verifier,
        spent_store=MongoSpentStore(db),
        refusals=MongoRefusalRecorder(db, service=f"sink:{settings.name}"),
    ).install(server)

    def post(path: str, body: dict[str, Any], key: str | None) -> dict[str, Any]:
        headers = {"content-type": "application/json"}
        if key is not None:
            headers["idempotency-key"] = key
        req = urllib.request.Request(settings.api_url + path, json.dumps(body).encode(), headers, method="POST")
        with urllib.request.urlopen(req, timeout=10) as res:
            out: dict[str, Any] = json.loads(res.read())
            return out

    def handled(tool: str) -> None:
        if settings.handler_log:
            with open(settings.handler_log, "a", encoding="utf-8") as f:
                f.write(f"{tool}\n")

    @server.tool(annotations=ToolAnnotations(idempotent_hint=True))
    def charge(order_id: str, amount_cents: int) -> str:
        """Charge an order. Retrying is safe: the charge is keyed by order and amount."""
        handled("charge")
        # The kernel's key, verified and re-derived from these arguments by the middleware:
        # the API keeps one charge per key, whoever retries.
        created = post("/v1/charges", {"order_id": order_id, "amount_cents": amount_cents}, idempotency_key())
        return f"charge {created['id']} for order {order_id}: {amount_cents} cents"

    @server.tool()
    def send_receipt(order_id: str) -> str:
        """E-mail the receipt of an order (Unsafe: every call sends one)."""
        handled("send_receipt")
        # No key to pass on: the middleware spent this call's capability, so it runs once.
        sent = post("/v1/receipts", {"order_id": order_id, "call_id": current_call().capability.call_id}, None)
        return f"receipt {sent['id']} sent for order {order_id}"

    return server


if __name__ == "__main__":
    build_server(Settings.from_env()).run("stdio")
