"""Sink-side verification cost per request, Python: one ASGI handler served bare and
behind keycap's SinkMiddleware, in one run, interleaved so that machine noise hits both
alike. Tokens are signed here with the test-only kernel key of
test/vectors/capability-verification.json, each with its own jti and key.

In process (``ratio``, ``verify_us_per_request``): requests driven straight into the ASGI
app (scope, receive, send), one at a time, so the numbers are the sink's own work. Over
HTTP (``http_ratio``): the same app under uvicorn in a child process, ``/bare`` exempt and
``/protected`` guarded, driven here over one keep-alive connection, one request at a time.

Prints one JSON line (what bench/sink-cost.ts collects):
{"language":"python","requests":N,"protected_per_s":…,"unprotected_per_s":…,"ratio":…,"verify_us_per_request":…,"how":…,"http_…":…}

    python clients/python/bench/sink_bench.py [SECONDS] [--no-http]   # SECONDS per part, default 3
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
import time
import uuid
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from keycap_client.sink import Sink, SinkMiddleware, StaticJwksSource, capability_from_scope

VECTORS = Path(__file__).resolve().parents[3] / "test/vectors/capability-verification.json"
TOOL = "bench.charge"
REPS = 5
TOKENS = 2000


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sign_tokens(n: int) -> tuple[str, list[str]]:
    """The public JWKS (text) and ``n`` idempotent capabilities signed with its key."""
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


def http_app() -> SinkMiddleware:
    """The HTTP part's server (uvicorn --factory): keys from KEYCAP_BENCH_JWKS."""
    keys = StaticJwksSource.from_text(os.environ["KEYCAP_BENCH_JWKS"])
    return SinkMiddleware(handler, Sink("bench", tools=[TOOL], keys=keys), exempt_paths=["/bare"])


class Totals:
    def __init__(self) -> None:
        self.n = 0
        self.s = 0.0

    def add(self, n: int, s: float) -> None:
        self.n += n
        self.s += s

    @property
    def per_s(self) -> float:
        return self.n / self.s


async def in_process(tokens: list[str], seconds: float) -> tuple[Totals, Totals]:
    """(protected, unprotected) over about ``seconds`` in all."""
    jwks, _ = sign_tokens(0)
    protected = SinkMiddleware(handler, Sink("bench", tools=[TOOL], keys=StaticJwksSource.from_text(jwks)))
    statuses: set[int] = set()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.add(message["status"])

    async def run(app: Any, budget: float) -> tuple[int, float]:
        start = time.perf_counter()
        n = 0
        while n % 64 != 0 or time.perf_counter() - start < budget:
            scope = {
                "type": "http",
                "method": "POST",
                "path": "/charges",
                "headers": [(b"authorization", f"Bearer {tokens[n % len(tokens)]}".encode())],
                "client": ("127.0.0.1", 50000),
            }
            await app(scope, receive, send)
            n += 1
        return n, time.perf_counter() - start

    await run(protected, 0.2)  # warm-up
    await run(handler, 0.2)
    p, u = Totals(), Totals()
    for _ in range(REPS):
        u.add(*await run(handler, seconds / REPS / 2))
        p.add(*await run(protected, seconds / REPS / 2))
    if statuses != {200}:
        raise SystemExit(f"sink_bench: not every request was admitted: {sorted(statuses)}")
    return p, u


def over_http(jwks: str, tokens: list[str], seconds: float) -> tuple[Totals, Totals]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "sink_bench:http_app", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"],
        cwd=Path(__file__).resolve().parent,
        env={**os.environ, "KEYCAP_BENCH_JWKS": jwks},
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("sink_bench: uvicorn did not start") from None
                time.sleep(0.05)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

        def run(path: str, budget: float) -> tuple[int, float]:
            start = time.perf_counter()
            n = 0
            while n % 16 != 0 or time.perf_counter() - start < budget:
                conn.request("POST", path, body=b"{}", headers={"authorization": f"Bearer {tokens[n % len(tokens)]}"})
                res = conn.getresponse()
                res.read()
                if res.status != 200:
                    raise SystemExit(f"sink_bench: {path} answered {res.status}")
                n += 1
            return n, time.perf_counter() - start

        run("/protected", 0.2)
        run("/bare", 0.2)
        p, u = Totals(), Totals()
        for _ in range(REPS):
            u.add(*run("/bare", seconds / REPS / 2))
            p.add(*run("/protected", seconds / REPS / 2))
        conn.close()
        return p, u
    finally:
        server.terminate()
        server.wait(timeout=10)


def main(seconds: float, http: bool) -> dict[str, object]:
    jwks, tokens = sign_tokens(TOKENS)
    p, u = asyncio.run(in_process(tokens, seconds))
    out: dict[str, object] = {
        "language": "python",
        "requests": p.n + u.n,
        "protected_per_s": round(p.per_s, 1),
        "unprotected_per_s": round(u.per_s, 1),
        "ratio": round(p.per_s / u.per_s, 4),
        "verify_us_per_request": round(1e6 / p.per_s - 1e6 / u.per_s, 2),
        "how": "in process: SinkMiddleware (the ledger's verifier via cryptography Ed25519 + allow-list) then the ASGI handler, vs the handler alone; one at a time",
    }
    if http:
        hp, hu = over_http(jwks, tokens, seconds)
        out.update(
            {
                "http_protected_per_s": round(hp.per_s, 1),
                "http_unprotected_per_s": round(hu.per_s, 1),
                "http_ratio": round(hp.per_s / hu.per_s, 4),
                "http_how": "uvicorn (h11) in a child process on loopback, keep-alive, one request at a time: /protected (SinkMiddleware) vs /bare (exempt)",
            }
        )
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("seconds", nargs="?", type=float, default=3.0, help="seconds for each part (default 3)")
    parser.add_argument("--no-http", action="store_true", help="in process only")
    args = parser.parse_args()
    print(json.dumps(main(args.seconds, not args.no_http)))
