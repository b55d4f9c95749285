/**
 * What keycap's MCP gateway (`keycap mcp`, services/mcp) and keycap-aware MCP servers (the
 * sink middleware, services/sink) agree on: the `_meta` keys each side reads and writes, the
 * kernel tool id of an MCP tool, and the shape of a refusal as an MCP error. Both sides
 * import it from here so the contract is stated once; the Python and Go middlewares follow
 * docs/mcp-server-typescript.md, which repeats it.
 */
import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";
import { Code, ERROR_DOMAIN, type KeycapError } from "./errors";
import type { Reason } from "./refuse";

// The `_meta` keys are namespaced as the MCP spec asks (a reverse-DNS prefix ending in `/`).

/** tools/call request from the host: the run the call belongs to (ADR 0023). */
export const META_RUN_ID = "io.keycap/run-id";
/** tools/call request to the upstream: the capability (compact JWS) of this call's attempt. */
export const META_CAPABILITY = "io.keycap/capability";
/** tools/call request to the upstream, and result to the host: the kernel-derived key. */
export const META_IDEMPOTENCY_KEY = "io.keycap/idempotency-key";
/** tools/call request to the upstream: a Queryable call's request id. */
export const META_REQUEST_ID = "io.keycap/request-id";
/** Both directions: the kernel call id. */
export const META_CALL_ID = "io.keycap/call-id";
/** Result to the host: true when the result is the stored one of an earlier call with the same key. */
export const META_REPLAY = "io.keycap/replay";
/** Result to the host: when the result was stored. */
export const META_RECORDED_AT = "io.keycap/recorded-at";
/** Result to the host: true on the gateway's own tool error, when nothing was sent upstream. */
export const META_NOT_SENT = "io.keycap/not-sent";
/**
 * tools/call request from the host: the run mode, "live" (default), "replay" or "shadow"
 * (ADR 0028); result to the host: the mode of a replay or shadow run's call.
 */
export const META_RUN_MODE = "io.keycap/run-mode";
/** tools/call request from the host, mode "replay": the recorded run replayed. */
export const META_REPLAY_OF = "io.keycap/replay-of";
/** tools/call request from the host, mode "shadow" (optional): the live run shadowed. */
export const META_SHADOWS = "io.keycap/shadows";
/** Result to the host: true on a shadow run's call, which was not sent upstream (ADR 0029). */
export const META_SHADOWED = "io.keycap/shadowed";
/** Result to the host, replay mode: the recorded call this one matched (its stored result is the answer). */
export const META_RECORDED_CALL_ID = "io.keycap/recorded-call-id";
/** Result to the host: true on a replay whose call had other arguments than the stored one's (same key; dedupe is by key only). */
export const META_ARGUMENTS_MISMATCH = "io.keycap/arguments-mismatch";

/**
 * The kernel tool id of an MCP tool: `mcp:<upstream>/<tool>`, where `<upstream>` is the
 * server's name in the gateway's policy.
 */
export function kernelToolId(upstream: string, tool: string): string {
  return `mcp:${upstream}/${tool}`;
}

/** `McpError.data` of every keycap refusal. */
export interface KeycapErrorData {
  reason: string;
  domain: typeof ERROR_DOMAIN;
  /** The kernel tool id the refusal concerns. */
  tool_id: string;
  metadata: Record<string, string>;
}

/** An MCP error carrying keycap's reason (a catalogue reason, or a gRPC code's name the kernel sent). */
export function keycapMcpError(code: ErrorCode, reason: Reason | string, message: string, toolId: string, metadata: Record<string, string> = {}): McpError {
  const data: KeycapErrorData = { reason, domain: ERROR_DOMAIN, tool_id: toolId, metadata };
  return new McpError(code, message, data);
}

/**
 * A refusal as an MCP error: keycap being unable to decide (keys or database unreachable,
 * a defect) is InternalError, so a client may retry; every other refusal is InvalidParams,
 * the JSON-RPC code for a request that will not be accepted as sent.
 */
export function mcpErrorOf(err: KeycapError, toolId: string): McpError {
  const code = err.code === Code.UNAVAILABLE || err.code === Code.INTERNAL ? ErrorCode.InternalError : ErrorCode.InvalidParams;
  return keycapMcpError(code, err.reason, `keycap refused the call: ${err.message}`, toolId, { ...err.metadata });
}
