"""The ``_meta`` keys keycap reads on MCP messages (services/mcp/src/meta-keys.ts), namespaced
as the MCP spec asks (a reverse-DNS prefix ending in ``/``)."""

from __future__ import annotations

from typing import Final

__all__ = ["META_CAPABILITY", "META_IDEMPOTENCY_KEY", "META_REQUEST_ID", "META_CALL_ID", "META_RUN_ID"]

#: tools/call from the gateway: the capability (compact JWS) of this call's attempt.
META_CAPABILITY: Final = "io.keycap/capability"
#: tools/call from the gateway: the kernel-derived key (Idempotent calls).
META_IDEMPOTENCY_KEY: Final = "io.keycap/idempotency-key"
#: tools/call from the gateway: a Queryable call's request id.
META_REQUEST_ID: Final = "io.keycap/request-id"
#: Both directions: the kernel call id.
META_CALL_ID: Final = "io.keycap/call-id"
#: tools/call from the host: the run the call belongs to (ADR 0023).
META_RUN_ID: Final = "io.keycap/run-id"
