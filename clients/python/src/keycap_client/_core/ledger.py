"""keycap.ledger.v1.LedgerService's operations as flows (the sync and asyncio ledger clients run them)."""

from __future__ import annotations

from keycap_client._core import wire
from keycap_client._core.call import Flow, Rpc
from keycap_client._gen.keycap.ledger.v1 import ledger_pb2


def write_with_capability(
    capability: str | None, *, key: str, request_id: str, payload: bytes | str, retry: bool
) -> Flow[ledger_pb2.WriteResponse]:
    """A write with ``capability`` as its bearer (None: none sent); ``retry`` False for a single-use one."""
    res: ledger_pb2.WriteResponse = yield Rpc("Write", wire.write(key, request_id, payload), capability, retry)
    return res


def lookup_with_capability(capability: str | None, request_id: str) -> Flow[ledger_pb2.LookupRequestResponse]:
    """Whether the effect of ``request_id`` took effect."""
    req = ledger_pb2.LookupRequestRequest(request_id=request_id)
    res: ledger_pb2.LookupRequestResponse = yield Rpc("LookupRequest", req, capability)
    return res
