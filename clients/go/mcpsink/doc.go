// Package mcpsink makes an MCP server built on the official Go SDK
// (github.com/modelcontextprotocol/go-sdk) a keycap sink: a tools/call of a
// governed tool runs its handler only under a genuine capability minted by the
// kernel for exactly that call (issue 29, ADR 0026).
//
// Behind `keycap mcp` (the gateway) every governed call arrives with the
// capability in `_meta["io.keycap/capability"]` and its key in
// `_meta["io.keycap/idempotency-key"]`. Sent any other way — straight to the
// server, by an agent or a misconfigured host — it carries none, or one that
// does not fit, and is refused before the handler runs:
//
//   - no capability, or one that does not verify (the ledger's profile and
//     reasons, ADR 0003), or has expired;
//   - a capability for another tool (TOOL_NOT_ACCEPTED);
//   - an Idempotent capability whose key does not re-derive from the arguments
//     the server received, with the capability's signed derivation claim
//     (KEY_MISMATCH), or that has no such claim (CLAIM_MISSING naming
//     "derivation": it cannot be bound to any arguments);
//   - an Unsafe or Queryable capability already spent (CAPABILITY_REUSED).
//
// A refusal is a JSON-RPC error whose data is {reason, domain, tool_id,
// metadata}, the shape of the gateway's own refusals, and is recorded in
// keycap's refusal store as service "sink:<name>". The handler reads the
// verified key with KeyFrom and passes it on as its own downstream
// Idempotency-Key.
package mcpsink
