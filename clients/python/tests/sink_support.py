"""Helpers of the sink tests: a real HTTP server for an ASGI app, forged capabilities made
from genuine ones, and the operator's view of refusals (`keycap rejections`)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from conftest import REPO_ROOT, Stack

VECTORS: dict[str, Any] = json.loads((REPO_ROOT / "test/vectors/capability-verification.json").read_text())
CLI = REPO_ROOT / "dist/services/cli/src/main.js"


def verdict_for(vector: Mapping[str, Any], verifier: str) -> dict[str, Any]:
    """The verdict a mode-aware verifier ("ledger", or "sink": every sink SDK and MCP
    middleware) must give: its own when the vector states one (``expect_by``), else ``expect``."""
    verdict: dict[str, Any] = vector.get("expect_by", {}).get(verifier, vector["expect"])
    return verdict


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def parts(token: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    h, p, s = token.split(".")
    return json.loads(unb64url(h)), json.loads(unb64url(p)), s


def vector_key(name: str) -> tuple[str, Ed25519PrivateKey]:
    """A test-only key of the vectors file (kid, private key)."""
    jwk = VECTORS["keys"][name]
    return jwk["kid"], Ed25519PrivateKey.from_private_bytes(unb64url(jwk["d"]))


def sign(header: Mapping[str, Any], payload: Mapping[str, Any], key: Ed25519PrivateKey) -> str:
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(payload).encode())}"
    return f"{signing_input}.{b64url(key.sign(signing_input.encode()))}"


def tampered(token: str, **claims: Any) -> str:
    """The genuine signature over a payload with other claims."""
    h, p, s = token.split(".")
    payload = {**json.loads(unb64url(p)), **claims}
    return f"{h}.{b64url(json.dumps(payload).encode())}.{s}"


def alg_none(token: str) -> str:
    header, payload, _ = parts(token)
    return f"{b64url(json.dumps({**header, 'alg': 'none'}).encode())}.{b64url(json.dumps(payload).encode())}."


def hs256(token: str, secret: bytes) -> str:
    header, payload, _ = parts(token)
    signing_input = f"{b64url(json.dumps({**header, 'alg': 'HS256'}).encode())}.{b64url(json.dumps(payload).encode())}"
    return f"{signing_input}.{b64url(hmac.new(secret, signing_input.encode(), hashlib.sha256).digest())}"


def signed_by_attacker(token: str) -> str:
    """The same claims under a kid the kernel never published, signed by another key."""
    kid, key = vector_key("attacker")
    header, payload, _ = parts(token)
    return sign({**header, "kid": kid}, payload, key)


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def http_request(base: str, method: str, path: str, headers: Mapping[str, str] | None = None, body: bytes = b"") -> Response:
    host, port = base.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(method, path, body=body, headers=dict(headers or {}))
        res = conn.getresponse()
        return Response(res.status, {k.lower(): v for k, v in res.getheaders()}, res.read())
    finally:
        conn.close()


@contextmanager
def serve_asgi(app: Any) -> Iterator[str]:
    """Serves ``app`` with uvicorn on a free loopback port; yields ``host:port``."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _cli_json(stack: Stack, *args: str) -> Any:
    """`keycap <args> --json --admin <stack>` as an operator runs it, its stdout parsed."""
    out = subprocess.run(
        ["node", str(CLI), *args, "--json", "--admin", stack.admin],
        cwd=REPO_ROOT,
        env={**os.environ, "KEYCAP_ADMIN_TOKEN": stack.admin_token},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


def cli_stats(stack: Stack) -> dict[str, Any]:
    """What the operator sees: `keycap stats --json` (totals from every writer's counters)."""
    stats: dict[str, Any] = _cli_json(stack, "stats")
    return stats


def cli_rejections(stack: Stack, service: str) -> list[dict[str, Any]]:
    """What the operator sees: `keycap rejections --service <service> --json`."""
    records: list[dict[str, Any]] = _cli_json(stack, "rejections", "--service", service)
    return records
