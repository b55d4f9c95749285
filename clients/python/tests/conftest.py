"""Starts a real keycap stack (MongoDB-protocol server, kernel, ledger, admin) for the session.

`node dist/test/support/e2e-stack.js` prints one JSON line with the addresses once
ready and stops everything when its stdin closes; the repo must be compiled first
(`make build`, or `npx tsc -p .`).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

import grpc

from keycap_client import AdminClient, KernelClient, KeycapError, LedgerClient
from keycap_client._gen.keycap.kernel.v1 import kernel_pb2, kernel_pb2_grpc

REPO_ROOT = Path(__file__).resolve().parents[3]
STACK_SCRIPT = REPO_ROOT / "dist/test/support/e2e-stack.js"
# Starting may build FerretDB on a machine without a downloadable mongod.
READY_TIMEOUT_S = float(os.environ.get("KEYCAP_E2E_READY_TIMEOUT_S", "600"))


@dataclass(frozen=True)
class StackTls:
    ca_file: str
    client_cert_file: str
    client_key_file: str
    client_principal: str
    unmapped_client_cert_file: str
    unmapped_client_key_file: str
    other_ca_file: str


@dataclass(frozen=True)
class Stack:
    kernel: str
    ledger: str
    admin: str
    admin_token: str
    runtime_token: str
    mongo_backend: str
    tls: StackTls | None = None
    #: keycap's database: where sinks record refusals and spend capabilities.
    mongodb_uri: str = ""
    mongodb_database: str = ""


@contextmanager
def _run_stack(extra_env: dict[str, str]) -> Iterator[Stack]:
    if not STACK_SCRIPT.exists():
        pytest.fail(f"{STACK_SCRIPT.relative_to(REPO_ROOT)} is missing: run `make build` (or `npx tsc -p .`) first")
    # The stack reports readiness from the services' "ready" log line, an info
    # record: an inherited KEYCAP_LOG_LEVEL=warn must not hide it.
    env = {**os.environ, "KEYCAP_LOG_LEVEL": "info", **extra_env}
    proc = subprocess.Popen(
        ["node", str(STACK_SCRIPT)],
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    try:
        ready = None
        while ready is None:
            try:
                line = lines.get(timeout=READY_TIMEOUT_S)
            except queue.Empty:
                pytest.fail(f"e2e stack not ready within {READY_TIMEOUT_S:.0f}s")
            if line is None:
                pytest.fail(f"e2e stack exited before it was ready (exit code {proc.wait()})")
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and "kernel" in rec:
                ready = rec
        tls = ready.get("tls")
        yield Stack(
            kernel=ready["kernel"],
            ledger=ready["ledger"],
            admin=ready["admin"],
            admin_token=ready["admin_token"],
            runtime_token=ready["runtime_token"],
            mongo_backend=ready["mongo_backend"],
            tls=StackTls(**tls) if isinstance(tls, dict) else None,
            mongodb_uri=ready.get("mongodb_uri", ""),
            mongodb_database=ready.get("mongodb_database", ""),
        )
    finally:
        proc.stdin.close()  # the stack stops everything when its stdin closes
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    with _run_stack({}) as s:
        # Clients made without a token (and the TypeScript runtime the tests spawn) find
        # the runtime credential by the default lookup, as they would after `make run`.
        os.environ["KEYCAP_RUNTIME_TOKEN"] = s.runtime_token
        yield s


@pytest.fixture(scope="session")
def tls_stack() -> Iterator[Stack]:
    """A second stack whose three listeners speak TLS (KEYCAP_E2E_TLS=1)."""
    with _run_stack({"KEYCAP_E2E_TLS": "1"}) as s:
        assert s.tls is not None, "the TLS stack reported no tls block"
        yield s


@pytest.fixture(scope="session")
def kernel(stack: Stack) -> Iterator[KernelClient]:
    with KernelClient(stack.kernel, ledger_address=stack.ledger) as client:
        yield client


@pytest.fixture(scope="session")
def ledger(stack: Stack) -> Iterator[LedgerClient]:
    with LedgerClient(stack.ledger) as client:
        yield client


@pytest.fixture(scope="session")
def admin(stack: Stack) -> Iterator[AdminClient]:
    with AdminClient(stack.admin, stack.admin_token) as client:
        yield client


@pytest.fixture
def tool_id() -> str:
    """A tool id no other test (or earlier run) has registered."""
    return f"py.e2e.charge.{uuid.uuid4().hex[:12]}"


def send_unchecked(stack: Stack, request: kernel_pb2.RegisterToolRequest) -> KeycapError:
    """Sends a RegisterTool request past the client's rule check, through the generated
    stub alone, and returns the kernel's refusal (fails the test if it accepted)."""
    with grpc.insecure_channel(stack.kernel) as channel:
        stub = kernel_pb2_grpc.KernelServiceStub(channel)  # type: ignore[no-untyped-call]
        try:
            stub.RegisterTool(request, timeout=10, metadata=(("authorization", f"Bearer {stack.runtime_token}"),))
        except grpc.RpcError as err:
            return KeycapError.from_rpc_error(err)
    pytest.fail(f"the kernel accepted {request}")
