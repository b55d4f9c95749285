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

# The reasons' gRPC code names that mean "these arguments cannot be keyed".
_ARGUMENT_CODES: Final = frozenset({"INVALID_ARGUMENT"})


class KeycapErrorData(TypedDict):
    """``MCPError.data`` of every keycap refusal."""

    reason: str
    domain: str
    #: The keycap tool id the refusal concerns (the governed tool that was called).
    tool_id: str
    metadata: dict[str, str]


def mcp_error_code(grpc_code_name: str) -> int:
    """The gateway's rule (call-errors.ts ``fromKernelError``): a reason whose gRPC code is
    INVALID_ARGUMENT (the arguments cannot be keyed) is InvalidParams; any other refusal
    (capability missing or invalid, another call's, reused, keycap unavailable) is InternalError."""
    return INVALID_PARAMS if grpc_code_name in _ARGUMENT_CODES else INTERNAL_ERROR


def keycap_mcp_error(
    grpc_code_name: str, reason: str, message: str, tool_id: str, metadata: Mapping[str, str] | None = None
) -> MCPError:
    """An MCP error carrying keycap's reason for a refusal of ``tool_id``."""
    data: KeycapErrorData = {"reason": reason, "domain": ERROR_DOMAIN, "tool_id": tool_id, "metadata": dict(metadata or {})}
    return MCPError(mcp_error_code(grpc_code_name), message, dict(data))
