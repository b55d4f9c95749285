"""ADR 0037, the decisions of the client core: which writes may ride in a Writes batch, and how
a batch of writes is built and sent (each write's capability in its item, no bearer on the
batch)."""

from __future__ import annotations

from typing import Any

import grpc

from keycap_client._core import batching
from keycap_client._core.call import Rpc
from keycap_client._gen.keycap.kernel.v1 import kernel_pb2
from keycap_client._gen.keycap.ledger.v1 import ledger_pb2
from keycap_client.errors import KeycapError, _rpc_types


def _write(payload: bytes, retry: bool = True, capability: str | None = "cap") -> Rpc:
    return Rpc("Write", ledger_pb2.WriteRequest(key="k", payload=payload), capability, retry)


def test_only_small_retryable_writes_are_batched() -> None:
    assert batching.batchable(_write(b"x" * batching.MAX_BATCHED_PAYLOAD_BYTES))
    assert not batching.batchable(_write(b"x" * (batching.MAX_BATCHED_PAYLOAD_BYTES + 1)))
    # A single-use capability's write is never retried blindly, nor sent in a batch.
    assert not batching.batchable(_write(b"x", retry=False))
    assert not batching.batchable(Rpc("LookupRequest", ledger_pb2.LookupRequestRequest(request_id="r"), "cap"))
    assert batching.batchable(Rpc("BeginCall", kernel_pb2.BeginCallRequest(tool_id="t"), "token"))


def test_a_writes_batch_carries_each_capability_in_its_item_and_no_bearer() -> None:
    rpcs = [_write(b"a", capability="cap-a"), _write(b"b", capability=None)]
    bearers = [r.bearer for r in rpcs]
    name, request = batching.batch_request("Write", [r.request for r in rpcs], (), bearers)
    assert name == "Writes" and isinstance(request, ledger_pb2.WritesRequest)
    assert [(w.capability, w.write.payload) for w in request.writes] == [("cap-a", b"a"), ("", b"b")]
    assert batching.batch_bearer("Write", bearers) is None
    assert batching.batch_bearer("BeginCall", ["token", "token"]) == "token"


def test_a_writes_answer_is_read_item_by_item() -> None:
    ok = ledger_pb2.WriteResponse(entry=ledger_pb2.Entry(call_id="c1"))
    # The encoded google.rpc.Status Write's trailer would carry (code 7, PERMISSION_DENIED).
    status_type: Any = _rpc_types()[0]
    encoded = status_type(code=grpc.StatusCode.PERMISSION_DENIED.value[0], message="no").SerializeToString()
    response = ledger_pb2.WritesResponse(results=[ledger_pb2.WriteResult(written=ok), ledger_pb2.WriteResult(error_status=encoded)])
    answers = batching.answers_of("Write", response, 2)
    assert answers[0] == ok
    assert isinstance(answers[1], KeycapError) and answers[1].code == grpc.StatusCode.PERMISSION_DENIED


def test_a_batch_refused_for_its_size_is_resent_one_by_one() -> None:
    assert batching.after_batch_refused(KeycapError(grpc.StatusCode.RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED", "too big")) == "alone"
    assert batching.after_batch_refused(KeycapError(grpc.StatusCode.UNIMPLEMENTED, "UNIMPLEMENTED", "older")) == "unsupported"
