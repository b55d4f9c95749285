"""The request rules in proto/ checked by the Python client before sending (issue 14).

Every rule class is refused client-side, sync and asyncio, with the reason the kernel
gives, while nothing is sent: the clients point at a tripwire, a TCP listener that
counts the connections made to it (a call that got past the check would connect, and
then time out). Parity: for the same invalid tools the refusal the client raises equals
the one the real kernel answers (reason, field, every field violation) when the check is
bypassed and the request goes out through the generated stub. A valid tool of each
effect class still registers. The registration helpers refuse the shapes the rules
refuse, with the same reason and path.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

from conftest import Stack, send_unchecked
from keycap_client._gen.keycap.kernel.v1 import kernel_pb2_grpc
from keycap_client import (
    CLIENT_ERROR_DOMAIN,
    ERROR_DOMAIN,
    FieldViolation,
    Idempotent,
    KernelClient,
    KeyDerivation,
    KeycapError,
    Queryable,
    ToolDefinition,
    Unsafe,
    request_rules,
)
from keycap_client._gen.keycap.effect.v1 import effect_pb2
from keycap_client._gen.keycap.kernel.v1 import kernel_pb2
from keycap_client._gen.keycap.ledger.v1 import ledger_pb2
from keycap_client._gen.keycap.rules.v1 import refusal_pb2
from keycap_client.aio import AsyncKernelClient

# --- the invalid tools, one per rule (each with the reason the proto names) ------------


@dataclass(frozen=True)
class Case:
    """An invalid RegisterTool request and the kernel's first reason and field for it."""

    name: str
    reason: str
    field: str
    build: Callable[[str], kernel_pb2.RegisterToolRequest]


def _tool(tool_id: str, **effect: object) -> kernel_pb2.RegisterToolRequest:
    return kernel_pb2.RegisterToolRequest(
        tool=kernel_pb2.Tool(tool_id=tool_id, effect_class=effect_pb2.EffectClass(**effect))  # type: ignore[arg-type]
    )


def _key(**key: object) -> effect_pb2.Idempotent:
    return effect_pb2.Idempotent(key=effect_pb2.KeyDerivation(**key))  # type: ignore[arg-type]


def _lookup(pointer: str | None) -> effect_pb2.Queryable:
    if pointer is None:
        return effect_pb2.Queryable()
    return effect_pb2.Queryable(lookup=effect_pb2.RequestIdLookup(request_id_field=pointer))


_KEY = "tool.effect_class.idempotent.key"
_RUN_ID = effect_pb2.CONTEXT_FIELD_RUN_ID

CASES = [
    Case("no tool", "TOOL_REQUIRED", "tool", lambda _id: kernel_pb2.RegisterToolRequest()),
    Case("a tool id with a space", "INVALID_TOOL_ID", "tool.tool_id", lambda _id: _tool(_id + " x", unsafe=effect_pb2.Unsafe())),
    Case("an empty tool id", "INVALID_TOOL_ID", "tool.tool_id", lambda _id: _tool("", unsafe=effect_pb2.Unsafe())),
    Case("a 129-character tool id", "INVALID_TOOL_ID", "tool.tool_id", lambda _id: _tool((_id + "x" * 129)[:129], unsafe=effect_pb2.Unsafe())),
    Case(
        "no effect class",
        "EFFECT_CLASS_REQUIRED",
        "tool.effect_class",
        lambda _id: kernel_pb2.RegisterToolRequest(tool=kernel_pb2.Tool(tool_id=_id)),
    ),
    Case("an empty effect class (the oneof unset)", "EFFECT_CLASS_REQUIRED", "tool.effect_class.kind", lambda _id: _tool(_id)),
    Case(
        "an Idempotent tool without a key derivation",
        "KEY_DERIVATION_REQUIRED",
        _KEY,
        lambda _id: _tool(_id, idempotent=effect_pb2.Idempotent()),
    ),
    Case("a key derivation without fields", "KEY_DERIVATION_NO_FIELDS", f"{_KEY}.fields", lambda _id: _tool(_id, idempotent=_key())),
    Case(
        "a key field named twice",
        "KEY_DERIVATION_DUPLICATE_FIELD",
        f"{_KEY}.fields",
        lambda _id: _tool(_id, idempotent=_key(fields=["/order_id", "/order_id"])),
    ),
    Case(
        "a key field that is not a JSON Pointer",
        "INVALID_JSON_POINTER",
        f"{_KEY}.fields[1]",
        lambda _id: _tool(_id, idempotent=_key(fields=["/order_id", "order_id"])),
    ),
    Case(
        "a key field with a bad escape (~2)",
        "INVALID_JSON_POINTER",
        f"{_KEY}.fields[0]",
        lambda _id: _tool(_id, idempotent=_key(fields=["/a~2"])),
    ),
    Case(
        "a context field named twice",
        "KEY_DERIVATION_BAD_CONTEXT_FIELD",
        f"{_KEY}.context_fields",
        lambda _id: _tool(_id, idempotent=_key(fields=["/n"], context_fields=[_RUN_ID, _RUN_ID])),
    ),
    Case(
        "CONTEXT_FIELD_UNSPECIFIED",
        "KEY_DERIVATION_BAD_CONTEXT_FIELD",
        f"{_KEY}.context_fields[0]",
        lambda _id: _tool(_id, idempotent=_key(fields=["/n"], context_fields=[effect_pb2.CONTEXT_FIELD_UNSPECIFIED])),
    ),
    Case(
        "an undefined context field",
        "KEY_DERIVATION_BAD_CONTEXT_FIELD",
        f"{_KEY}.context_fields[1]",
        lambda _id: _tool(_id, idempotent=_key(fields=["/n"], context_fields=[_RUN_ID, 7])),
    ),
    Case(
        "a Queryable tool without a lookup",
        "REQUEST_ID_FIELD_REQUIRED",
        "tool.effect_class.queryable.lookup",
        lambda _id: _tool(_id, queryable=_lookup(None)),
    ),
    Case(
        "an empty request id field",
        "REQUEST_ID_FIELD_REQUIRED",
        "tool.effect_class.queryable.lookup.request_id_field",
        lambda _id: _tool(_id, queryable=_lookup("")),
    ),
    Case(
        "a request id field that is not a JSON Pointer",
        "INVALID_JSON_POINTER",
        "tool.effect_class.queryable.lookup.request_id_field",
        lambda _id: _tool(_id, queryable=_lookup("request_id")),
    ),
    Case(
        "several rules at once (the first one's reason, every violation listed)",
        "INVALID_TOOL_ID",
        "tool.tool_id",
        lambda _id: _tool("bad id", idempotent=_key(fields=["/a", "/a", "b"], context_fields=[0, 7])),
    ),
]

REASONS = {c.reason for c in CASES}

# The batch RPCs' rules (ADR 0022): the Python client sends no batches, but the rules are
# the proto's, so its check answers them as the kernel does for code that builds them.
BATCH_CASES: list[tuple[str, Message, str, str]] = [
    ("an empty BeginCalls", kernel_pb2.BeginCallsRequest(), "BATCH_EMPTY", "calls"),
    ("257 begins", kernel_pb2.BeginCallsRequest(calls=[kernel_pb2.BeginCallRequest()] * 257), "BATCH_TOO_LARGE", "calls"),
    ("an empty CompleteCalls", kernel_pb2.CompleteCallsRequest(), "BATCH_EMPTY", "calls"),
    ("257 completes", kernel_pb2.CompleteCallsRequest(calls=[kernel_pb2.CompleteCallRequest()] * 257), "BATCH_TOO_LARGE", "calls"),
]

BATCH_REASONS = {c[2] for c in BATCH_CASES}

# The call requests' id and limit rules (issue 31: once checked by hand in the kernel). Each:
# the request, the RPC, the reason and field the kernel answers, and the client call that
# would send it (sync; the asyncio client shares the core).
_OK = kernel_pb2.CALL_OUTCOME_SUCCEEDED
CALL_CASES: list[tuple[str, Message, str, str, str]] = [
    ("a call id with a space", kernel_pb2.BeginCallRequest(tool_id="py.rules.t", call_id="a b", arguments_json="{}"), "BeginCall", "INVALID_CALL_ID", "call_id"),
    ("a 129-character call id", kernel_pb2.BeginCallRequest(tool_id="py.rules.t", call_id="c" * 129, arguments_json="{}"), "BeginCall", "INVALID_CALL_ID", "call_id"),
    ("a 257-character run id", kernel_pb2.BeginCallRequest(tool_id="py.rules.t", run_id="r" * 257, arguments_json="{}"), "BeginCall", "INVALID_RUN_ID", "run_id"),
    (
        "a 257-character recorded run id",
        kernel_pb2.BeginCallRequest(tool_id="py.rules.t", run_id="r", mode=kernel_pb2.RUN_MODE_REPLAY, replay_of_run_id="é" * 257, arguments_json="{}"),
        "BeginCall",
        "INVALID_RUN_MODE",
        "replay_of_run_id",
    ),
    (
        "a 257-character shadowed run id",
        kernel_pb2.BeginCallRequest(tool_id="py.rules.t", mode=kernel_pb2.RUN_MODE_SHADOW, shadows_run_id="s" * 257, arguments_json="{}"),
        "BeginCall",
        "INVALID_RUN_MODE",
        "shadows_run_id",
    ),
    ("a completion without a call id", kernel_pb2.CompleteCallRequest(outcome=_OK), "CompleteCall", "INVALID_CALL_ID", "call_id"),
    ("a 4097-character outcome detail", kernel_pb2.CompleteCallRequest(call_id="c-1", outcome=_OK, outcome_detail="d" * 4097), "CompleteCall", "OUTCOME_DETAIL_TOO_LONG", "outcome_detail"),
    ("a resume of a call id with a slash", kernel_pb2.ResumeCallRequest(call_id="a/b"), "ResumeCall", "INVALID_CALL_ID", "call_id"),
    ("a run listing without a run id", kernel_pb2.ListRunCallsRequest(), "ListRunCalls", "INVALID_RUN_ID", "run_id"),
    ("a run listing of a 257-character run id", kernel_pb2.ListRunCallsRequest(run_id="r" * 257), "ListRunCalls", "INVALID_RUN_ID", "run_id"),
]

CALL_REASONS = {c[3] for c in CALL_CASES}


def test_the_cases_cover_every_reason_the_protos_name() -> None:
    """Read from the descriptors, so a rule added to proto/ without a case here fails."""
    named: set[str] = set()
    for desc in (effect_pb2.DESCRIPTOR, kernel_pb2.DESCRIPTOR):
        for message in desc.message_types_by_name.values():
            for f in message.fields:
                field_options: Any = f.GetOptions()
                named.update(r.reason for r in field_options.Extensions[refusal_pb2.field])
            for o in message.oneofs:
                oneof_options: Any = o.GetOptions()
                named.update(r.reason for r in oneof_options.Extensions[refusal_pb2.oneof])
    assert named == REASONS | BATCH_REASONS | CALL_REASONS


# --- nothing is sent: a tripwire stands where the kernel would be ------------------------


class Tripwire:
    """A TCP listener that accepts and counts connections and never answers."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.1)
        self.address = f"127.0.0.1:{self._sock.getsockname()[1]}"
        self.connections = 0
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            self.connections += 1
            self._held.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for conn in self._held:
            conn.close()
        self._sock.close()


@pytest.fixture
def tripwire() -> Iterator[Tripwire]:
    t = Tripwire()
    yield t
    t.close()


def test_the_tripwire_sees_a_request_that_is_sent(tripwire: Tripwire) -> None:
    """The proof below means something: a valid request does reach it (and times out)."""
    with KernelClient(tripwire.address, token="t", timeout=1.0) as kernel:
        with pytest.raises(KeycapError) as caught:
            kernel.register_tool(ToolDefinition("py.rules.tripwire", Unsafe()))
    assert caught.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert tripwire.connections >= 1


def _assert_client_refusal(err: KeycapError, case: Case) -> None:
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT
    assert err.reason == case.reason
    assert err.domain == CLIENT_ERROR_DOMAIN
    assert err.metadata["field"] == case.field
    assert err.field_violations and err.field_violations[0].field == case.field
    assert err.field_violations[0].reason == case.reason


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_sync_client_refuses_before_sending(case: Case, tripwire: Tripwire) -> None:
    request = case.build("py.rules.sync")
    with KernelClient(tripwire.address, token="t", timeout=2.0) as kernel:
        with pytest.raises(KeycapError) as caught:
            if request.HasField("tool"):
                kernel.register_tool(request.tool)
            else:
                kernel.register_tool(None)  # type: ignore[arg-type]
    _assert_client_refusal(caught.value, case)
    assert tripwire.connections == 0


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_asyncio_client_refuses_before_sending(case: Case, tripwire: Tripwire) -> None:
    request = case.build("py.rules.aio")

    async def scenario() -> KeycapError:
        async with AsyncKernelClient(tripwire.address, token="t", timeout=2.0) as kernel:
            with pytest.raises(KeycapError) as caught:
                await kernel.register_tool(request.tool if request.HasField("tool") else None)  # type: ignore[arg-type]
            return caught.value

    _assert_client_refusal(asyncio.run(scenario()), case)
    assert tripwire.connections == 0


def test_requests_without_rules_are_not_checked() -> None:
    """Write (the ledger's hot path) has no rules: nothing to evaluate there."""
    assert request_rules.has_rules(kernel_pb2.RegisterToolRequest.DESCRIPTOR)
    assert request_rules.has_rules(kernel_pb2.BeginCallRequest.DESCRIPTOR)
    assert not request_rules.has_rules(kernel_pb2.GetToolRequest.DESCRIPTOR)
    assert not request_rules.has_rules(ledger_pb2.WriteRequest.DESCRIPTOR)
    assert request_rules.refusal(ledger_pb2.WriteRequest()) is None


# --- parity with the real kernel ---------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_client_refuses_as_the_kernel_does(case: Case, stack: Stack, tool_id: str) -> None:
    request = case.build(tool_id)
    mine = request_rules.refusal(request)
    assert mine is not None
    kernels = send_unchecked(stack, request)  # past the check, through the generated stub
    assert kernels.code == grpc.StatusCode.INVALID_ARGUMENT
    assert kernels.domain == ERROR_DOMAIN
    assert (kernels.reason, dict(kernels.metadata)) == (case.reason, {"field": case.field})
    assert (mine.reason, dict(mine.metadata)) == (kernels.reason, dict(kernels.metadata))
    assert mine.field_violations == kernels.field_violations
    assert len(kernels.field_violations) >= 1


@pytest.mark.parametrize(("request_", "reason", "field"), [c[1:] for c in BATCH_CASES], ids=[c[0] for c in BATCH_CASES])
def test_a_batch_is_refused_as_the_kernel_does(request_: Message, reason: str, field: str, stack: Stack) -> None:
    mine = request_rules.refusal(request_)
    assert mine is not None
    assert (mine.code, mine.reason, dict(mine.metadata)) == (grpc.StatusCode.INVALID_ARGUMENT, reason, {"field": field})
    with grpc.insecure_channel(stack.kernel) as channel:
        stub = kernel_pb2_grpc.KernelServiceStub(channel)  # type: ignore[no-untyped-call]
        send = stub.BeginCalls if isinstance(request_, kernel_pb2.BeginCallsRequest) else stub.CompleteCalls
        with pytest.raises(grpc.RpcError) as caught:
            send(request_, timeout=10, metadata=(("authorization", f"Bearer {stack.runtime_token}"),))
    kernels = KeycapError.from_rpc_error(caught.value)
    assert (kernels.code, kernels.domain, kernels.reason, dict(kernels.metadata)) == (grpc.StatusCode.INVALID_ARGUMENT, ERROR_DOMAIN, reason, {"field": field})
    assert mine.field_violations == kernels.field_violations


def _send_call_request(kernel: KernelClient, request: Message) -> object:
    """What the client does with ``request``: the public method that would send it."""
    if isinstance(request, kernel_pb2.BeginCallRequest):
        return kernel.begin_call(request.tool_id, request.arguments_json, call_id=request.call_id, run_id=request.run_id)
    if isinstance(request, kernel_pb2.CompleteCallRequest):
        return kernel.complete_call(request.call_id, "succeeded", request.outcome_detail)
    if isinstance(request, kernel_pb2.ResumeCallRequest):
        return kernel.resume_call(request.call_id)
    raise AssertionError(f"no client method sends {type(request).__name__}")


# The cases the client's own methods can build (the run-mode ones go out through the stub).
_CLIENT_SENT = [c for c in CALL_CASES if c[2] != "ListRunCalls" and getattr(c[1], "mode", 0) == 0]


@pytest.mark.parametrize(("request_", "reason", "field"), [(c[1], c[3], c[4]) for c in _CLIENT_SENT], ids=[c[0] for c in _CLIENT_SENT])
def test_the_client_refuses_a_call_request_before_sending(request_: Message, reason: str, field: str, tripwire: Tripwire) -> None:
    with KernelClient(tripwire.address, token="t", timeout=2.0) as kernel:
        with pytest.raises(KeycapError) as caught:
            _send_call_request(kernel, request_)
    err = caught.value
    assert (err.code, err.reason, err.domain, err.metadata["field"]) == (grpc.StatusCode.INVALID_ARGUMENT, reason, CLIENT_ERROR_DOMAIN, field)
    assert tripwire.connections == 0


@pytest.mark.parametrize(("request_", "method", "reason", "field"), [c[1:] for c in CALL_CASES], ids=[c[0] for c in CALL_CASES])
def test_a_call_request_is_refused_as_the_kernel_does(request_: Message, method: str, reason: str, field: str, stack: Stack) -> None:
    mine = request_rules.refusal(request_)
    assert mine is not None
    assert (mine.code, mine.reason, dict(mine.metadata)) == (grpc.StatusCode.INVALID_ARGUMENT, reason, {"field": field})
    with grpc.insecure_channel(stack.kernel) as channel:
        stub = kernel_pb2_grpc.KernelServiceStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.RpcError) as caught:
            getattr(stub, method)(request_, timeout=10, metadata=(("authorization", f"Bearer {stack.runtime_token}"),))
    kernels = KeycapError.from_rpc_error(caught.value)
    assert (kernels.code, kernels.domain, kernels.reason, dict(kernels.metadata)) == (grpc.StatusCode.INVALID_ARGUMENT, ERROR_DOMAIN, reason, {"field": field})
    assert mine.field_violations == kernels.field_violations


def test_a_long_refused_value_is_shown_cut_as_the_kernel_cuts_it(stack: Stack) -> None:
    request = kernel_pb2.CompleteCallRequest(call_id="c-1", outcome=_OK, outcome_detail="é" * 4097)
    mine = request_rules.refusal(request)
    assert mine is not None
    assert mine.field_violations[0].description.endswith('(got "' + "é" * 64 + '…")')
    with grpc.insecure_channel(stack.kernel) as channel:
        stub = kernel_pb2_grpc.KernelServiceStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.RpcError) as caught:
            stub.CompleteCall(request, timeout=10, metadata=(("authorization", f"Bearer {stack.runtime_token}"),))
    assert KeycapError.from_rpc_error(caught.value).field_violations == mine.field_violations


def test_a_refusal_lists_every_failing_rule(stack: Stack, tool_id: str) -> None:
    request = _tool("bad id", idempotent=_key(fields=["/a", "/a", "b"], context_fields=[0, 7]))
    kernels = send_unchecked(stack, request)
    assert [(v.field, v.reason) for v in kernels.field_violations] == [
        ("tool.tool_id", "INVALID_TOOL_ID"),
        (f"{_KEY}.fields", "KEY_DERIVATION_DUPLICATE_FIELD"),
        (f"{_KEY}.fields[2]", "INVALID_JSON_POINTER"),
        (f"{_KEY}.context_fields[0]", "KEY_DERIVATION_BAD_CONTEXT_FIELD"),
        (f"{_KEY}.context_fields[1]", "KEY_DERIVATION_BAD_CONTEXT_FIELD"),
    ]
    mine = request_rules.refusal(request)
    assert mine is not None and mine.field_violations == kernels.field_violations
    assert mine.field_violations[2].description.endswith('(got "b")')


# --- valid tools still register ------------------------------------------------------------


def _valid_tools(tool_id: str) -> list[ToolDefinition]:
    return [
        ToolDefinition(f"{tool_id}.i", Idempotent(KeyDerivation(["/order_id", "/customer/id", "/a~1b~0c"], run_id=True))),
        ToolDefinition(f"{tool_id}.q", Queryable("/request_id")),
        ToolDefinition(f"{tool_id}.u", Unsafe()),
    ]


def test_a_valid_tool_of_each_effect_class_registers(kernel: KernelClient, tool_id: str) -> None:
    for tool in _valid_tools(tool_id):
        assert request_rules.refusal(kernel_pb2.RegisterToolRequest(tool=tool.to_proto())) is None
        assert not kernel.register_tool(tool).already_registered
        assert kernel.register_tool(tool.to_proto()).already_registered  # the wire form too
        assert kernel.get_tool(tool.id).effect_class == tool.to_proto().effect_class


def test_a_valid_tool_registers_through_the_asyncio_client(stack: Stack, tool_id: str) -> None:
    async def scenario() -> None:
        async with AsyncKernelClient(stack.kernel) as kernel:
            for tool in _valid_tools(tool_id):
                assert not (await kernel.register_tool(tool)).already_registered

    asyncio.run(scenario())


# --- the registration helpers ----------------------------------------------------------------


HELPER_CASES: list[tuple[str, Callable[[], object], str, str]] = [
    ("no key fields", lambda: KeyDerivation([]), "KEY_DERIVATION_NO_FIELDS", f"{_KEY}.fields"),
    ("a key field twice", lambda: KeyDerivation(["/a", "/a"]), "KEY_DERIVATION_DUPLICATE_FIELD", f"{_KEY}.fields"),
    ("a key field not a pointer", lambda: KeyDerivation(["/a", "b"]), "INVALID_JSON_POINTER", f"{_KEY}.fields[1]"),
    ("a key field with ~2", lambda: KeyDerivation(["/a~2"]), "INVALID_JSON_POINTER", f"{_KEY}.fields[0]"),
    ("Idempotent(None)", lambda: Idempotent(None), "KEY_DERIVATION_REQUIRED", _KEY),  # type: ignore[arg-type]
    ("an empty request id field", lambda: Queryable(""), "REQUEST_ID_FIELD_REQUIRED", "tool.effect_class.queryable.lookup.request_id_field"),
    ("a request id field not a pointer", lambda: Queryable("rid"), "INVALID_JSON_POINTER", "tool.effect_class.queryable.lookup.request_id_field"),
    ("a bad tool id", lambda: ToolDefinition("a b", Unsafe()), "INVALID_TOOL_ID", "tool.tool_id"),
    ("an empty tool id", lambda: ToolDefinition("", Unsafe()), "INVALID_TOOL_ID", "tool.tool_id"),
    ("no effect", lambda: ToolDefinition("py.rules.none", None), "EFFECT_CLASS_REQUIRED", "tool.effect_class"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("make", "reason", "field"), [c[1:] for c in HELPER_CASES], ids=[c[0] for c in HELPER_CASES])
def test_the_helpers_refuse_what_the_rules_refuse(make: Callable[[], object], reason: str, field: str) -> None:
    with pytest.raises(KeycapError) as caught:
        make()
    err = caught.value
    assert (err.code, err.reason, err.domain) == (grpc.StatusCode.INVALID_ARGUMENT, reason, CLIENT_ERROR_DOMAIN)
    assert err.metadata["field"] == field


def test_the_helpers_refuse_as_the_kernel_does(stack: Stack, tool_id: str) -> None:
    """A helper's refusal names the reason and path the kernel gives for the same wire shape."""
    shapes: list[tuple[Callable[[], object], kernel_pb2.RegisterToolRequest]] = [
        (lambda: KeyDerivation(["/a", "b"]), _tool(tool_id, idempotent=_key(fields=["/a", "b"], version=1))),
        (lambda: Queryable("rid"), _tool(tool_id, queryable=_lookup("rid"))),
        (lambda: ToolDefinition("a b", Unsafe()), _tool("a b", unsafe=effect_pb2.Unsafe())),
    ]
    for make, wire in shapes:
        with pytest.raises(KeycapError) as caught:
            make()
        kernels = send_unchecked(stack, wire)
        assert (caught.value.reason, caught.value.field_violations) == (kernels.reason, kernels.field_violations)


def test_the_helpers_refuse_wrong_python_types() -> None:
    with pytest.raises(TypeError, match="list of JSON Pointers"):
        KeyDerivation("/order_id")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a str"):
        KeyDerivation([1])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="KeyDerivation"):
        Idempotent("/order_id")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unknown effect spec"):
        ToolDefinition("py.rules.x", "unsafe")  # type: ignore[arg-type]
    assert KeyDerivation(("/a", "/b")).fields == ("/a", "/b")


# --- the mapping itself ------------------------------------------------------------------------


def _message_with_an_unnamed_rule() -> type:
    """A message, in a private pool, with a protovalidate rule and no keycap reason for it:
    ``Outer.inner`` is ``(buf.validate.field).required = true``, written as the option bytes
    protoc emits (extension 1159, FieldRules.required = 25)."""
    file = descriptor_pb2.FileDescriptorProto(name="keycap_test/unnamed.proto", package="keycap_test", syntax="proto3")
    file.message_type.add(name="Inner")
    outer = file.message_type.add(name="Outer")
    field = outer.field.add(name="inner", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE, type_name=".keycap_test.Inner")
    field.options.MergeFromString(b"\xba\x48\x03\xc8\x01\x01")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("keycap_test.Outer"))


def test_a_rule_without_a_named_reason_is_request_invalid() -> None:
    outer = _message_with_an_unnamed_rule()
    err = request_rules.refusal(outer())
    assert err is not None
    assert (err.reason, err.field_violations) == (
        request_rules.UNNAMED_RULE_REASON,
        (FieldViolation("inner", "value is required", "REQUEST_INVALID"),),
    )
    assert request_rules.UNNAMED_RULE_REASON == "REQUEST_INVALID"


def test_a_refusal_survives_pickling_with_its_violations() -> None:
    err = request_rules.refusal(kernel_pb2.RegisterToolRequest())
    assert err is not None
    again = pickle.loads(pickle.dumps(err))
    assert (again.reason, again.domain, again.field_violations) == (err.reason, err.domain, err.field_violations)


# --- buf/validate in protobuf's global pool -----------------------------------------------------

_OTHER_VALIDATE = """
from google.protobuf import descriptor_pb2, descriptor_pool
other = descriptor_pb2.FileDescriptorProto(name="buf/validate/validate.proto", package="buf.validate", syntax="proto3")
other.message_type.add(name="NotKeycapsCopy")
descriptor_pool.Default().Add(other)
"""
_USE_KEYCAP = """
from keycap_client import request_rules
from keycap_client._gen.keycap.effect.v1 import effect_pb2
from keycap_client._gen.keycap.kernel.v1 import kernel_pb2
key = effect_pb2.EffectClass(idempotent=effect_pb2.Idempotent(key=effect_pb2.KeyDerivation()))
err = request_rules.refusal(kernel_pb2.RegisterToolRequest(tool=kernel_pb2.Tool(tool_id="t", effect_class=key)))
assert err is not None and err.reason == "KEY_DERIVATION_NO_FIELDS", err
"""


@pytest.mark.parametrize("first", ["another copy first", "keycap_client first"])
def test_keycap_client_coexists_with_another_buf_validate_in_the_global_pool(first: str) -> None:
    """An application's own buf/validate/validate.proto (another version) and keycap_client
    in one process, in either import order: keycap registers no copy of its own."""
    body = _OTHER_VALIDATE + _USE_KEYCAP if first == "another copy first" else _USE_KEYCAP + _OTHER_VALIDATE + _USE_KEYCAP
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(body)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
