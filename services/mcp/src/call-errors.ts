/**
 * The gateway's refusals toward the host: an MCP (JSON-RPC) error whose `data` carries
 * keycap's reason, so a host or framework branches on `data.reason`, never on the text.
 */
import { status } from "@grpc/grpc-js";
import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";
import { KeycapClientError, type Reason } from "../../../clients/ts/src";
import { ERROR_DOMAIN } from "../../common/src/errors";

/** `McpError.data` of every keycap refusal. */
export interface KeycapErrorData {
  reason: string;
  domain: typeof ERROR_DOMAIN;
  /** The kernel tool id the refusal concerns. */
  tool_id: string;
  metadata: Record<string, string>;
}

/** An MCP error carrying keycap's reason. */
export function keycapMcpError(code: ErrorCode, reason: Reason, message: string, toolId: string, metadata: Record<string, string> = {}): McpError {
  return mcpErrorWithReason(code, reason, message, toolId, metadata);
}

/** As keycapMcpError, for a reason the kernel sent (a catalogue reason, or a gRPC code's name). */
function mcpErrorWithReason(code: ErrorCode, reason: string, message: string, toolId: string, metadata: Record<string, string>): McpError {
  const data: KeycapErrorData = { reason, domain: ERROR_DOMAIN, tool_id: toolId, metadata };
  return new McpError(code, message, data);
}

/**
 * A kernel refusal (or failure) of BeginCall as the host sees it: INVALID_ARGUMENT (the call's
 * arguments cannot be keyed) is InvalidParams; anything else is InternalError. The reason is
 * the kernel's (KEY_FIELD_MISSING, ARGUMENTS_NOT_OBJECT, …).
 */
export function fromKernelError(err: unknown, toolId: string): McpError {
  const e = KeycapClientError.from(err);
  const code = e.code === status.INVALID_ARGUMENT ? ErrorCode.InvalidParams : ErrorCode.InternalError;
  return mcpErrorWithReason(code, e.reason, `keycap refused the call: ${e.summary}`, toolId, { ...e.metadata });
}
