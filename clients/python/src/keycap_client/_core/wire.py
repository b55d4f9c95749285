"""Requests whose building is more than naming their fields (encodings, enum mappings,
client-side validation, the listings' page size): part of the client core, so the sync
clients and their asyncio twins send the same bytes for the same arguments."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

import grpc
from google.protobuf import timestamp_pb2

from keycap_client._gen.keycap.kernel.v1 import access_pb2, kernel_pb2
from keycap_client._gen.keycap.ledger.v1 import ledger_admin_pb2, ledger_pb2
from keycap_client.errors import CLIENT_ERROR_DOMAIN, KeycapError
from keycap_client._core.call import LIST_PAGE_SIZE, client_error
from keycap_client import run_modes
from keycap_client.run_modes import RunMode
from keycap_client.tool_definition import ToolDefinition

_OUTCOMES = {
    "succeeded": kernel_pb2.CALL_OUTCOME_SUCCEEDED,
    "failed": kernel_pb2.CALL_OUTCOME_FAILED,
}

_ROLES = {"runtime": access_pb2.PRINCIPAL_ROLE_RUNTIME, "operator": access_pb2.PRINCIPAL_ROLE_OPERATOR}


def _ts(value: datetime | None) -> timestamp_pb2.Timestamp | None:
    if value is None:
        return None
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(value)
    return ts


# --- kernel -----------------------------------------------------------------


def register_tool(tool: ToolDefinition | kernel_pb2.Tool) -> kernel_pb2.RegisterToolRequest:
    wire = tool.to_proto() if isinstance(tool, ToolDefinition) else tool
    return kernel_pb2.RegisterToolRequest(tool=wire)


def list_tools(page_token: str) -> kernel_pb2.ListToolsRequest:
    return kernel_pb2.ListToolsRequest(page_size=LIST_PAGE_SIZE, page_token=page_token)


def arguments_json(args: Mapping[str, Any] | str) -> str:
    """``begin``'s arguments: a mapping serialised to compact JSON, or JSON text sent as given."""
    return args if isinstance(args, str) else json.dumps(args, separators=(",", ":"), allow_nan=False)


def complete_call(
    call_id: str, outcome: Literal["succeeded", "failed"], detail: str
) -> kernel_pb2.CompleteCallRequest:
    return kernel_pb2.CompleteCallRequest(call_id=call_id, outcome=_OUTCOMES[outcome], outcome_detail=detail)


def list_pending_calls(tool_id: str, page_token: str) -> kernel_pb2.ListPendingCallsRequest:
    return kernel_pb2.ListPendingCallsRequest(tool_id=tool_id, page_size=LIST_PAGE_SIZE, page_token=page_token)


# --- ledger -----------------------------------------------------------------


def write(key: str, request_id: str, payload: bytes | str) -> ledger_pb2.WriteRequest:
    """A write of ``payload`` (str payloads are UTF-8)."""
    body = payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)
    return ledger_pb2.WriteRequest(key=key, request_id=request_id, payload=body)


# --- ledger admin -----------------------------------------------------------


def list_entries(tool_id: str, page_token: str, page_size: int) -> ledger_admin_pb2.ListEntriesRequest:
    return ledger_admin_pb2.ListEntriesRequest(tool_id=tool_id, page_size=page_size, page_token=page_token)


def get_entry(key: str | None, entry_id: str | None) -> ledger_admin_pb2.GetEntryRequest:
    """By idempotency key or entry id; exactly one (else a client-side KeycapError)."""
    if (key is None) == (entry_id is None):
        raise client_error("SELECTOR_REQUIRED", "get_entry needs exactly one of key or entry_id")
    return (
        ledger_admin_pb2.GetEntryRequest(key=key)
        if key is not None
        else ledger_admin_pb2.GetEntryRequest(entry_id=entry_id)
    )


def list_rejections(
    *,
    tool_id: str,
    reason: str,
    since: datetime | None,
    until: datetime | None,
    service: str,
    page_token: str,
    page_size: int,
) -> ledger_admin_pb2.ListRejectionsRequest:
    return ledger_admin_pb2.ListRejectionsRequest(
        tool_id=tool_id,
        reason=reason,
        since=_ts(since),
        until=_ts(until),
        page_size=page_size,
        page_token=page_token,
        service=service,
    )


# --- access -----------------------------------------------------------------


def create_principal(name: str, role: Literal["runtime", "operator"]) -> access_pb2.CreatePrincipalRequest:
    return access_pb2.CreatePrincipalRequest(name=name, role=_ROLES[role])


def list_principals(page_token: str) -> access_pb2.ListPrincipalsRequest:
    return access_pb2.ListPrincipalsRequest(page_size=LIST_PAGE_SIZE, page_token=page_token)


def list_grants(tool_id: str, principal: str, page_token: str) -> access_pb2.ListGrantsRequest:
    return access_pb2.ListGrantsRequest(
        tool_id=tool_id, principal=principal, page_size=LIST_PAGE_SIZE, page_token=page_token
    )


def begin_call_request(
    tool_id: str, arguments_json: str, call_id: str, run_id: str, mode: RunMode
) -> kernel_pb2.BeginCallRequest:
    """A BeginCallRequest in run mode ``mode`` whose call id is chosen here when the caller
    gives none, so a BeginCall resent after a lost answer (the UNAVAILABLE retry) finds the
    call its first try journaled instead of journaling a second one."""
    for field, text in (("arguments_json", arguments_json), ("run_id", run_id)):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate is not text UTF-8 can carry: refused, never replaced.
            raise KeycapError(
                grpc.StatusCode.INVALID_ARGUMENT,
                "INVALID_UTF8",
                f"{field} holds a lone surrogate, which is not text UTF-8 can carry (not sent)",
                domain=CLIENT_ERROR_DOMAIN,
            ) from None
    req = kernel_pb2.BeginCallRequest(
        tool_id=tool_id, arguments_json=arguments_json, call_id=call_id or str(uuid.uuid4()), run_id=run_id
    )
    return run_modes.apply(req, mode)
