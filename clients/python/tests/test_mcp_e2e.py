"""Issue 29 acceptance, Python: the keycap-aware example server (examples/mcp_charge_server.py)
behind the real gateway (`keycap mcp`) and kernel, and the same server called directly.

Through the gateway a charge goes through once, and the Stripe-like API sees the kernel's
key. Sent to the server directly, without a capability, with one for other arguments, with
another tool's, with an expired one, or with an Unsafe one already used, the call is refused
before the handler runs, and `keycap rejections --service sink:<name>` lists every refusal
with the tool id.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp_types import INVALID_PARAMS, CallToolResult, RequestParamsMeta, TextContent

import mcp_charge_server
from conftest import REPO_ROOT, Stack
from keycap_client import KernelClient
from keycap_client.key_derivation import KeyDerivationSpec, derive_key
from keycap_client.mcp import META_CAPABILITY, META_IDEMPOTENCY_KEY, governed_tool_id
from keycap_client.sink import KernelJwksSource, VerifierOptions
from sink_support import CLI, cli_rejections

EXAMPLE = REPO_ROOT / "clients/python/examples/mcp_charge_server.py"
Outcome = CallToolResult | MCPError


@dataclass
class PaymentsApi:
    """A Stripe-like API: one charge per Idempotency-Key, every request counted."""

    url: str = ""
    requests: list[str | None] = field(default_factory=list)
    charges: dict[str, str] = field(default_factory=dict)
    receipts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def api() -> Iterator[PaymentsApi]:
    state = PaymentsApi()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            key = self.headers.get("idempotency-key")
            with state.lock:
                state.requests.append(key)
                if self.path == "/v1/charges" and key is not None:
                    # The first request with a key creates the charge; later ones get it again.
                    charge_id = state.charges.setdefault(key, f"ch_{len(state.charges) + 1}")
                    body, status = {"id": charge_id}, 200
                elif self.path == "/v1/receipts":
                    state.receipts += 1
                    body, status = {"id": f"rc_{state.receipts}"}, 200
                else:
                    body, status = {"error": "an Idempotency-Key is required"}, 400
            out = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield state
    finally:
        httpd.shutdown()
        thread.join(timeout=10)


def server_env(stack: Stack, api: PaymentsApi, name: str, handler_log: Path) -> dict[str, str]:
    return {
        "PAYMENTS_API_URL": api.url,
        "KEYCAP_MCP_SERVER_NAME": name,
        "KEYCAP_KERNEL_ADDRESS": stack.kernel,
        "MONGODB_URI": stack.mongodb_uri,
        "KEYCAP_MONGODB_DATABASE": stack.mongodb_database,
        "CHARGE_HANDLER_LOG": str(handler_log),
    }


def gateway_policy(path: Path, name: str, env: dict[str, str]) -> Path:
    """The gateway's policy: this server as upstream ``name`` (so its tools are mcp:<name>/…)."""
    policy = {
        "version": 1,
        "upstreams": {
            name: {
                "command": sys.executable,
                "args": [str(EXAMPLE)],
                "env": env,
                "tools": {
                    "charge": {"class": "idempotent", "key": ["/order_id", "/amount_cents"]},
                    "send_receipt": {"class": "unsafe"},
                },
            }
        },
    }
    path.write_text(json.dumps(policy))  # JSON is YAML
    return path


@asynccontextmanager
async def session(params: StdioServerParameters, errlog: Path) -> AsyncIterator[ClientSession]:
    with errlog.open("a") as err:
        async with stdio_client(params, errlog=err) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                yield s


async def call(s: ClientSession | Client, tool: str, args: dict[str, Any], capability: str | None = None) -> Outcome:
    meta = RequestParamsMeta(**{META_CAPABILITY: capability}) if capability is not None else None  # type: ignore[typeddict-unknown-key]
    try:
        return await s.call_tool(tool, args, meta=meta)
    except MCPError as err:
        return err


def handler_runs(log: Path, tool: str) -> int:
    return log.read_text().splitlines().count(tool) if log.exists() else 0


def reason(outcome: Outcome) -> str:
    assert isinstance(outcome, MCPError), f"admitted: {outcome}"
    data = outcome.data
    assert isinstance(data, dict)
    r: str = data["reason"]
    return r


def test_the_example_charges_once_through_the_gateway_and_refuses_every_direct_call_without_a_capability_for_it(
    stack: Stack, kernel: KernelClient, api: PaymentsApi, tmp_path: Path
) -> None:
    name = f"pay-{uuid.uuid4().hex[:10]}"
    charge_id, receipt_id = governed_tool_id(name, "charge"), governed_tool_id(name, "send_receipt")
    log = tmp_path / "handler.log"
    env = server_env(stack, api, name, log)
    policy = gateway_policy(tmp_path / "policy.json", name, env)
    args: dict[str, Any] = {"order_id": "o-1", "amount_cents": 500}
    gateway = StdioServerParameters(
        command="node",
        args=[str(CLI), "mcp", "--policy", str(policy)],
        env={
            "HOME": str(tmp_path),
            "KEYCAP_KERNEL_ADDRESS": stack.kernel,
            "KEYCAP_RUNTIME_TOKEN": stack.runtime_token,
            "MONGODB_URI": stack.mongodb_uri,
            "KEYCAP_MONGODB_DATABASE": stack.mongodb_database,
        },
        cwd=str(REPO_ROOT),
    )
    direct = StdioServerParameters(command=sys.executable, args=[str(EXAMPLE)], env=env)
    expected_key = derive_key(charge_id, KeyDerivationSpec(["/order_id", "/amount_cents"]), args)

    async def through_the_gateway() -> tuple[Outcome, Outcome]:
        async with session(gateway, tmp_path / "gateway.stderr") as s:
            first = await call(s, "charge", args)
            # The host's retry: the gateway replays the stored result, nothing reaches the server.
            again = await call(s, "charge", {"amount_cents": 500, "order_id": "o-1"})
            return first, again

    first, again = anyio.run(through_the_gateway)
    assert isinstance(first, CallToolResult) and not first.is_error, first
    assert isinstance(first.content[0], TextContent) and first.content[0].text == "charge ch_1 for order o-1: 500 cents"
    assert (first.meta or {})[META_IDEMPOTENCY_KEY] == expected_key
    assert isinstance(again, CallToolResult) and (again.meta or {}).get("io.keycap/replay") is True
    assert api.requests == [expected_key], "the API saw the kernel's key, once"
    assert handler_runs(log, "charge") == 1

    # Genuine capabilities from the kernel, for calls the direct caller does not make.
    other_args = kernel.begin_call(charge_id, json.dumps({"order_id": "o-2", "amount_cents": 500})).capability
    other_tool = kernel.begin_call(receipt_id, json.dumps({"order_id": "o-1"})).capability
    receipt = kernel.begin_call(receipt_id, json.dumps({"order_id": "o-1"})).capability

    async def directly() -> dict[str, Outcome]:
        out: dict[str, Outcome] = {}
        async with session(direct, tmp_path / "direct.stderr") as s:
            out["none"] = await call(s, "charge", args)
            out["other arguments"] = await call(s, "charge", args, other_args)
            out["other tool"] = await call(s, "charge", args, other_tool)
            out["receipt"] = await call(s, "send_receipt", {"order_id": "o-1"}, receipt)
            out["receipt reused"] = await call(s, "send_receipt", {"order_id": "o-1"}, receipt)
        return out

    outcomes = anyio.run(directly)
    assert {k: reason(v) for k, v in outcomes.items() if k != "receipt"} == {
        "none": "CAPABILITY_MISSING",
        "other arguments": "KEY_MISMATCH",
        "other tool": "TOOL_NOT_ACCEPTED",
        "receipt reused": "CAPABILITY_REUSED",
    }
    assert isinstance(outcomes["receipt"], CallToolResult) and not outcomes["receipt"].is_error
    for k in ("none", "other arguments", "other tool"):
        o = outcomes[k]
        assert isinstance(o, MCPError) and o.data["tool_id"] == charge_id and o.data["domain"] == "keycap.dev"
    # Every refusal here is one keycap decided: InvalidParams, as in TypeScript and Go.
    assert {k: v.code for k, v in outcomes.items() if isinstance(v, MCPError)} == dict.fromkeys(
        ("none", "other arguments", "other tool", "receipt reused"), INVALID_PARAMS
    )
    # A capability for other arguments names the key these arguments derive: the one the gateway's call had.
    other = outcomes["other arguments"]
    assert isinstance(other, MCPError) and other.data["metadata"] == {"derived_key": expected_key}

    # Expired: a genuine capability for exactly these arguments, presented to the same server
    # an hour later (its verifier's clock moved on, as in the sink tests).
    fresh = kernel.begin_call(charge_id, json.dumps(args)).capability
    keys = KernelJwksSource.from_kernel(stack.kernel)
    late = mcp_charge_server.Settings(
        name=name,
        api_url=api.url,
        keys=keys,
        mongodb_uri=stack.mongodb_uri,
        database=stack.mongodb_database,
        handler_log=str(log),
        verifier=VerifierOptions(clock=lambda: time.time() + 3600),
    )

    async def an_hour_later() -> Outcome:
        async with Client(mcp_charge_server.build_server(late)) as c:
            return await call(c, "charge", args, fresh)

    expired = anyio.run(an_hour_later)
    assert reason(expired) == "EXPIRED" and isinstance(expired, MCPError) and expired.code == INVALID_PARAMS
    keys.close()

    # Before the handler: the charge handler ran once (through the gateway), the receipt
    # handler once (its first use), and the API saw nothing else.
    assert handler_runs(log, "charge") == 1
    assert handler_runs(log, "send_receipt") == 1
    assert api.requests == [expected_key, None] and api.receipts == 1

    records = cli_rejections(stack, f"sink:{name}")
    listed = sorted((r["reason"], r["toolId"]) for r in records)
    assert listed == sorted(
        [
            ("CAPABILITY_MISSING", charge_id),
            ("KEY_MISMATCH", charge_id),
            ("TOOL_NOT_ACCEPTED", charge_id),
            ("EXPIRED", charge_id),
            ("CAPABILITY_REUSED", receipt_id),
        ]
    ), records
