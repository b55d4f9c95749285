"""keycap for MCP servers written with the official Python SDK (``mcp`` 2.x; issue 29).

:class:`KeycapMcpMiddleware` refuses a governed ``tools/call`` that does not carry a valid
capability for exactly these arguments, before its handler runs, and records the refusal
as ``sink:<server name>``; inside the handler, :func:`idempotency_key` (or
:func:`current_call`) gives the verified key to pass on downstream. See
docs/mcp-server-python.md. Needs the ``mcp`` extra.
"""

from keycap_client.mcp.call import GovernedCall, current_call, idempotency_key
from keycap_client.mcp.errors import KeycapErrorData, keycap_mcp_error, mcp_error_code
from keycap_client.mcp.meta_keys import META_CALL_ID, META_CAPABILITY, META_IDEMPOTENCY_KEY, META_REQUEST_ID, META_RUN_ID
from keycap_client.mcp.middleware import KeycapMcpMiddleware, McpRefusal, McpRefusalEvent, governed_tool_id

__all__ = [
    "GovernedCall",
    "KeycapErrorData",
    "KeycapMcpMiddleware",
    "META_CALL_ID",
    "META_CAPABILITY",
    "META_IDEMPOTENCY_KEY",
    "META_REQUEST_ID",
    "META_RUN_ID",
    "McpRefusal",
    "McpRefusalEvent",
    "current_call",
    "governed_tool_id",
    "idempotency_key",
    "keycap_mcp_error",
    "mcp_error_code",
]
