/**
 * The gateway's refusals toward the host: an MCP (JSON-RPC) error whose `data` carries
 * keycap's reason, so a host or framework branches on `data.reason`, never on the text.
 */
import { status } from "@grpc/grpc-js";
import { ErrorCode, type McpError } from "@modelcontextprotocol/sdk/types.js";
import { KeycapClientError, Reasons } from "../../../clients/ts/src";
import { keycapMcpError } from "../../common/src/mcp-contract";

// The error shape is shared with keycap-aware MCP servers (services/sink), so it lives in common.
export { keycapMcpError, type KeycapErrorData } from "../../common/src/mcp-contract";

/** A sandbox run's refusals at BeginCall: the call will never be accepted as sent in that run, like bad arguments. */
const RUN_MODE_REFUSALS: ReadonlySet<string> = new Set([Reasons.SANDBOX_UNSAFE_DENIED, Reasons.REPLAY_DIVERGED]);

/**
 * A kernel refusal (or failure) of BeginCall as the host sees it: INVALID_ARGUMENT (the call's
 * arguments cannot be keyed) and a sandbox run's refusals (ADR 0029) are InvalidParams;
 * anything else is InternalError. The reason is the kernel's (KEY_FIELD_MISSING,
 * ARGUMENTS_NOT_OBJECT, SANDBOX_UNSAFE_DENIED, …).
 */
export function fromKernelError(err: unknown, toolId: string): McpError {
  const e = KeycapClientError.from(err);
  const code = e.code === status.INVALID_ARGUMENT || RUN_MODE_REFUSALS.has(e.reason) ? ErrorCode.InvalidParams : ErrorCode.InternalError;
  return keycapMcpError(code, e.reason, `keycap refused the call: ${e.summary}`, toolId, { ...e.metadata });
}
