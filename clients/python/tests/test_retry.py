"""The client through a service that is restarting (issue 15): a call waits for the
channel to be ready, and an UNAVAILABLE answer (keycap's "retry") is retried within the
deadline, except a single-use capability's write. A real gRPC server stands in for the
ledger, so the failures happen exactly when the test says."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from keycap_client import KeycapError, LedgerClient
from keycap_client._gen.keycap.ledger.v1 import ledger_pb2


class FlakyLedger:
    """LedgerService.Write answering UNAVAILABLE `failures` times, then OK."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def write(self, request: ledger_pb2.WriteRequest, context: grpc.ServicerContext) -> ledger_pb2.WriteResponse:
        self.calls += 1
        if self.calls <= self.failures:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the database is unavailable; retry")
        return ledger_pb2.WriteResponse(duplicate=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(port: int, ledger: FlakyLedger) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.method_handlers_generic_handler(
        "keycap.ledger.v1.LedgerService",
        {
            "Write": grpc.unary_unary_rpc_method_handler(
                ledger.write,
                request_deserializer=ledger_pb2.WriteRequest.FromString,
                response_serializer=ledger_pb2.WriteResponse.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server


@pytest.fixture
def port() -> Iterator[int]:
    yield _free_port()


def test_unavailable_answers_are_retried_until_one_succeeds(port: int) -> None:
    flaky = FlakyLedger(failures=2)
    server = _serve(port, flaky)
    try:
        with LedgerClient(f"127.0.0.1:{port}", timeout=10) as ledger:
            res = ledger.write_with_capability("cap", key="k", payload=b"x")
        assert res.duplicate is False
        assert flaky.calls == 3
    finally:
        server.stop(None)


def test_a_single_use_write_is_not_retried(port: int) -> None:
    flaky = FlakyLedger(failures=1)
    server = _serve(port, flaky)
    try:
        with LedgerClient(f"127.0.0.1:{port}", timeout=10) as ledger, pytest.raises(KeycapError) as info:
            ledger.write_with_capability("cap", request_id="r", payload=b"x", retry=False)
        assert info.value.code == grpc.StatusCode.UNAVAILABLE
        assert flaky.calls == 1
    finally:
        server.stop(None)


def test_a_call_made_while_the_service_is_down_waits_for_it(port: int) -> None:
    flaky = FlakyLedger(failures=0)
    servers: list[grpc.Server] = []
    starter = threading.Timer(1.0, lambda: servers.append(_serve(port, flaky)))
    starter.start()
    try:
        started = time.monotonic()
        with LedgerClient(f"127.0.0.1:{port}", timeout=15) as ledger:
            res = ledger.write_with_capability("cap", key="k", payload=b"x")
        assert res.duplicate is False
        assert time.monotonic() - started >= 0.9  # it really waited for the server
    finally:
        starter.join()
        for s in servers:
            s.stop(None)


def test_a_resent_begin_call_names_the_call_its_first_try_created(port: int) -> None:
    """A BeginCall whose answer was lost is resent with the same client-chosen call id,
    so the kernel finds the call the first try journaled instead of journaling another."""
    from keycap_client import KernelClient
    from keycap_client._gen.keycap.kernel.v1 import kernel_pb2

    seen: list[str] = []

    def begin(request: kernel_pb2.BeginCallRequest, context: grpc.ServicerContext) -> kernel_pb2.BeginCallResponse:
        seen.append(request.call_id)
        if len(seen) <= 2:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the database is unavailable; retry")
        return kernel_pb2.BeginCallResponse(call=kernel_pb2.Call(call_id=request.call_id, tool_id=request.tool_id), capability="cap")

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.method_handlers_generic_handler(
        "keycap.kernel.v1.KernelService",
        {
            "BeginCall": grpc.unary_unary_rpc_method_handler(
                begin,
                request_deserializer=kernel_pb2.BeginCallRequest.FromString,
                response_serializer=kernel_pb2.BeginCallResponse.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        with KernelClient(f"127.0.0.1:{port}", token="t", timeout=10) as kernel:
            res = kernel.begin_call("x.tool", "{}")
        assert len(seen) == 3
        assert seen[0] != "" and seen == [seen[0]] * 3
        assert res.call.call_id == seen[0]
    finally:
        server.stop(None)


def test_a_credential_too_large_for_http2_headers_is_refused_before_sending(port: int) -> None:
    flaky = FlakyLedger(failures=0)
    server = _serve(port, flaky)
    try:
        with LedgerClient(f"127.0.0.1:{port}", timeout=5) as ledger, pytest.raises(KeycapError) as info:
            ledger.write_with_capability("x" * (100 * 1024), key="k", payload=b"x")
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.reason == "CAPABILITY_TOO_LARGE"
        assert flaky.calls == 0
    finally:
        server.stop(None)


@pytest.mark.parametrize(("arguments", "run_id"), [('{"v":"\ud800"}', ""), ("{}", "run-\udc00")])
def test_a_lone_surrogate_is_refused_before_sending(port: int, arguments: str, run_id: str) -> None:
    from keycap_client import KernelClient

    # Nothing listens on the port: a server's answer would be UNAVAILABLE at the deadline.
    with KernelClient(f"127.0.0.1:{port}", token="t", timeout=1) as kernel, pytest.raises(KeycapError) as info:
        kernel.begin_call("x.tool", arguments, run_id=run_id)
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.reason == "INVALID_UTF8"
