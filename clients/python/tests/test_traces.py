"""Issue 13: the Python client propagates the caller's OpenTelemetry context (W3C traceparent),
so the kernel's span of the call joins the caller's trace. The stack exports its spans over
OTLP/HTTP (JSON) to a real receiver run by this test."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from conftest import Stack, _run_stack
from keycap_client import KernelClient, KeycapError

SERVER_KIND = 2


class _Receiver(ThreadingHTTPServer):
    spans: list[dict[str, Any]]


class _Handler(BaseHTTPRequestHandler):
    server: _Receiver

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self._body()
        if self.path == "/v1/traces":
            msg = json.loads(body)
            for rs in msg.get("resourceSpans", []):
                for ss in rs.get("scopeSpans", []):
                    self.server.spans.extend(ss.get("spans", []))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def _body(self) -> bytes:
        if "content-length" in self.headers:
            return self.rfile.read(int(self.headers["content-length"]))
        # Node's exporter may send the body chunked.
        out = b""
        while True:
            size = int(self.rfile.readline().strip().split(b";")[0], 16)
            if size == 0:
                self.rfile.readline()
                return out
            out += self.rfile.read(size)
            self.rfile.readline()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def receiver() -> Iterator[_Receiver]:
    server = _Receiver(("127.0.0.1", 0), _Handler)
    server.spans = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def traced_stack(receiver: _Receiver) -> Iterator[Stack]:
    env = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_address[1]}",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
    }
    with _run_stack(env) as s:
        yield s


def test_a_call_made_inside_a_span_is_part_of_that_trace_in_the_kernel(traced_stack: Stack, receiver: _Receiver) -> None:
    tracer = TracerProvider().get_tracer("keycap-python-test")
    with KernelClient(traced_stack.kernel, token=traced_stack.runtime_token) as kernel:
        with tracer.start_as_current_span("agent.python-call") as span:
            with pytest.raises(KeycapError) as refused:
                kernel.begin_call("traces.python-unknown", '{"order": "p1"}')
            ctx = span.get_span_context()
    assert refused.value.reason == "TOOL_NOT_FOUND"
    trace_id, span_id = format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")

    def server_span() -> dict[str, Any] | None:
        for s in list(receiver.spans):
            if s["traceId"] == trace_id and s["kind"] == SERVER_KIND and s["name"].endswith("KernelService/BeginCall"):
                return s
        return None

    deadline = time.monotonic() + 15
    while server_span() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    found = server_span()
    assert found is not None, "the kernel exported no BeginCall span in the caller's trace"
    # The kernel's span is a child of the caller's span: the traceparent carried its id.
    assert found["parentSpanId"] == span_id
    reasons = [a["value"].get("stringValue") for a in found.get("attributes", []) if a["key"] == "keycap.refusal.reason"]
    assert reasons == ["TOOL_NOT_FOUND"]
