"""Sink-side verification cost per request, Python: one ASGI handler served bare and
behind keycap's SinkMiddleware, in one run, interleaved in rounds so that machine noise
hits both alike. Requests are driven in-process (scope, receive, send), so the numbers
are the sink's own work, not an HTTP client's. Tokens are signed here with the test-only
kernel key of test/vectors/capability-verification.json, each with its own jti and key.

Prints one JSON line:
{"language":"python","requests":N,"protected_per_s":…,"unprotected_per_s":…,"ratio":…,"verify_us_per_request":…}

    python clients/python/bench/sink_bench.py [--requests N]   # N per side, default 20000
    python clients/python/bench/sink_bench.py --http           # through uvicorn instead

``--http`` serves the handler with uvicorn in a child process (``/bare`` exempt,
``/protected`` behind the middleware) and drives it from keep-alive connections here; the
JSON line then also says ``"transport":"http"``. There the bare side costs an HTTP
exchange, so the ratio is what a real service sees; the in-process default isolates the
sink's own cost (``verify_us_per_request``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from keycap_client.sink import Sink, SinkMiddleware, StaticJwksSource, capability_from_scope

VECTORS = Path(__file__).resolve().parents[3] / "test/vectors/capability-verification.json"
TOOL = "bench.charge"
ROUNDS = 10


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sign_tokens(n: int) -> tuple[str, list[str]]:
    """The public JWKS (text) and ``n`` tokens signed with its key."""
    jwk = json.loads(VECTORS.read_text())["keys"]["kernel-current"]
    key = Ed25519PrivateKey.from_private_bytes(base64.urlsafe_b64decode(jwk["d"] + "="))
    public = {k: v for k, v in jwk.items() if k != "d"}
    header = b64url(json.dumps({"alg": "EdDSA", "typ": "keycap-capability+jwt", "kid": jwk["kid"]}).encode())
    now = int(time.time())
    tokens = []
    for _ in range(n):
        claims = {
            "iss": "keycap-kernel",
            "aud": "keycap-ledger",
            "sub": "bench-runtime",
            "tool_id": TOOL,
            "effect": "idempotent",
            "call_id": str(uuid.uuid4()),
            "attempt": 1,
            "jti": str(uuid.uuid4()),
            "key": b64url(uuid.uuid4().bytes * 2),
            "iat": now,
            "exp": now + 300,
        }
        signing_input = f"{header}.{b64url(json.dumps(claims).encode())}"
        tokens.append(f"{signing_input}.{b64url(key.sign(signing_input.encode()))}")
    return json.dumps({"keys": [public]}), tokens


async def handler(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
    """The effect's own handler: reads the key it would dedup on, answers 200."""
    key = capability_from_scope(scope).key if "keycap.capability" in scope else "-"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": (key or "").encode()})


async def drive(app: Any, tokens: list[str]) -> float:
    """Serves one request per token; returns the seconds it took."""
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    start = time.perf_counter()
    for token in tokens:
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/charges",
            "headers": [(b"authorization", f"Bearer {token}".encode()), (b"content-type", b"application/json")],
            "client": ("127.0.0.1", 50000),
        }
        await app(scope, receive, send)
    elapsed = time.perf_counter() - start
    if statuses != [200] * len(tokens):
        raise SystemExit(f"bench: not every request was admitted: {sorted(set(statuses))}")
    return elapsed


async def main(requests: int) -> dict[str, object]:
    jwks, tokens = sign_tokens(min(requests, 5000))
    protected = SinkMiddleware(handler, Sink("bench", tools=[TOOL], keys=StaticJwksSource.from_text(jwks)))
    per_round = max(1, requests // ROUNDS)
    batch = [tokens[i % len(tokens)] for i in range(per_round)]
    await drive(protected, batch[:200])  # warm-up: imports, caches
    await drive(handler, batch[:200])
    t_protected = t_unprotected = 0.0
    for _ in range(ROUNDS):
        t_unprotected += await drive(handler, batch)
        t_protected += await drive(protected, batch)
    return _result(per_round * ROUNDS, t_protected, t_unprotected)


def http_app() -> SinkMiddleware:
    """The --http server (uvicorn --factory): keys from KEYCAP_BENCH_JWKS."""
    keys = StaticJwksSource.from_text(os.environ["KEYCAP_BENCH_JWKS"])
    return SinkMiddleware(handler, Sink("bench", tools=[TOOL], keys=keys), exempt_paths=["/bare"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _drive_http(port: int, path: str, tokens: list[str], clients: int) -> float:
    """Serves the tokens over ``clients`` keep-alive connections; returns the seconds it took."""
    chunks = [tokens[i::clients] for i in range(clients)]
    failures: list[int] = []

    def run(chunk: list[str]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for token in chunk:
            conn.request("POST", path, body=b"{}", headers={"authorization": f"Bearer {token}"})
            res = conn.getresponse()
            res.read()
            if res.status != 200:
                failures.append(res.status)
        conn.close()

    threads = [threading.Thread(target=run, args=(c,)) for c in chunks]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if failures:
        raise SystemExit(f"bench: not every request was admitted: {sorted(set(failures))}")
    return elapsed


def main_http(requests: int, clients: int = 4) -> dict[str, object]:
    jwks, tokens = sign_tokens(min(requests, 5000))
    port = _free_port()
    env = {**os.environ, "KEYCAP_BENCH_JWKS": jwks}
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "sink_bench:http_app", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"],
        cwd=Path(__file__).resolve().parent,
        env=env,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("bench: uvicorn did not start") from None
                time.sleep(0.05)
        per_round = max(clients, requests // ROUNDS)
        batch = [tokens[i % len(tokens)] for i in range(per_round)]
        _drive_http(port, "/protected", batch[:200], clients)
        _drive_http(port, "/bare", batch[:200], clients)
        t_protected = t_bare = 0.0
        for _ in range(ROUNDS):
            t_bare += _drive_http(port, "/bare", batch, clients)
            t_protected += _drive_http(port, "/protected", batch, clients)
    finally:
        server.terminate()
        server.wait(timeout=10)
    n = per_round * ROUNDS
    return {**_result(n, t_protected, t_bare), "transport": "http"}


def _result(n: int, t_protected: float, t_unprotected: float) -> dict[str, object]:
    protected_per_s, unprotected_per_s = n / t_protected, n / t_unprotected
    return {
        "language": "python",
        "requests": n,
        "protected_per_s": round(protected_per_s, 1),
        "unprotected_per_s": round(unprotected_per_s, 1),
        "ratio": round(protected_per_s / unprotected_per_s, 4),
        "verify_us_per_request": round((t_protected - t_unprotected) / n * 1e6, 2),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=None, help="requests per side (default 20000; --http 4000)")
    parser.add_argument("--http", action="store_true", help="through uvicorn in a child process")
    args = parser.parse_args()
    if args.http:
        print(json.dumps(main_http(args.requests or 4000)))
    else:
        print(json.dumps(asyncio.run(main(args.requests or 20000))))
