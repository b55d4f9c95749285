"""A keycap refusal as an MCP (JSON-RPC) error: ``data`` carries keycap's reason in the
gateway's shape (services/mcp/src/call-errors.ts ``KeycapErrorData``), so a host or
framework branches on ``data["reason"]``, never on the text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, TypedDict

from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from keycap_client.errors import ERROR_DOMAIN

__all__ = ["KeycapErrorData", "keycap_mcp_error", "mcp_error_code"]

# The reasons' gRPC code names that mean "keycap could not decide" (services/common/src/mcp-contract.ts mcpErrorOf).
_UNDECIDED_CODES: Final = frozenset({"UNAVAILABLE", "INTERNAL"})


class KeycapErrorData(TypedDict):
    """``MCPError.data`` of every keycap refusal."""

    reason: str
    domain: str
    #: The keycap tool id the refusal concerns (the governed tool that was called).
    tool_id: str
    metadata: dict[str, str]


def mcp_error_code(grpc_code_name: str) -> int:
    """The TypeScript and Go middlewares' rule (services/common/src/mcp-contract.ts
    ``mcpErrorOf``): keycap unable to decide (a reason whose gRPC code is UNAVAILABLE or
    INTERNAL: SIGNING_KEYS_UNAVAILABLE, DATABASE_UNAVAILABLE, INTERNAL; retry) is
    InternalError (-32603); every other refusal (no capability, one that does not verify,
    another tool's or call's, reused) is InvalidParams (-32602), a request that will not be
    accepted as sent."""
    return INTERNAL_ERROR if grpc_code_name in _UNDECIDED_CODES else INVALID_PARAMS


def keycap_mcp_error(
    grpc_code_name: str, reason: str, message: str, tool_id: str, metadata: Mapping[str, str] | None = None
) -> MCPError:
    """An MCP error carrying keycap's reason for a refusal of ``tool_id``."""
    data: KeycapErrorData = {"reason": reason, "domain": ERROR_DOMAIN, "tool_id": tool_id, "metadata": dict(metadata or {})}
    return MCPError(mcp_error_code(grpc_code_name), message, dict(data))
