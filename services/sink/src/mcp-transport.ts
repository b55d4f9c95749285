/**
 * A server transport that admits each governed tools/call before the server sees it. It sits
 * between the SDK's transport and its `Server` / `McpServer`, so it works for either, over any
 * transport (stdio, Streamable HTTP), and a refusal is an MCP error sent by keycap itself:
 * McpServer turns whatever a tool handler throws into a tool result (`isError: true`), which
 * is the tool's answer, not a refusal, and arrives after the handler ran.
 *
 * A call being admitted is held back while later messages pass, so a `notifications/cancelled`
 * for it is remembered and the call, once admitted, is dropped without an answer (as MCP asks
 * of a cancelled request).
 */
import type { Transport, TransportSendOptions } from "@modelcontextprotocol/sdk/shared/transport.js";
import {
  isJSONRPCNotification,
  isJSONRPCRequest,
  McpError,
  type JSONRPCMessage,
  type JSONRPCRequest,
  type MessageExtraInfo,
  type RequestId,
} from "@modelcontextprotocol/sdk/types.js";
import { rememberCall } from "./mcp-call";
import type { McpSink, ToolCallParams } from "./mcp-server";
import { Reasons, refuse } from "../../common/src/refuse";

export type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";

/** See the file comment; made by {@link McpSink.guard}. */
export class GuardedTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: <T extends JSONRPCMessage>(message: T, extra?: MessageExtraInfo) => void;
  /** Calls being admitted, by request id: true once the client cancelled it. */
  private readonly held = new Map<RequestId, { cancelled: boolean }>();

  constructor(
    private readonly inner: Transport,
    private readonly sink: McpSink,
  ) {
    inner.onclose = () => this.onclose?.();
    inner.onerror = (error) => this.onerror?.(error);
    inner.onmessage = (message, extra) => this.receive(message, extra);
  }

  get sessionId(): string | undefined {
    return this.inner.sessionId;
  }

  setProtocolVersion(version: string): void {
    this.inner.setProtocolVersion?.(version);
  }

  start(): Promise<void> {
    return this.inner.start();
  }

  send(message: JSONRPCMessage, options?: TransportSendOptions): Promise<void> {
    return this.inner.send(message, options);
  }

  close(): Promise<void> {
    return this.inner.close();
  }

  private receive(message: JSONRPCMessage, extra?: MessageExtraInfo): void {
    if (isJSONRPCRequest(message) && message.method === "tools/call") {
      const params = message.params as (ToolCallParams & { name?: unknown }) | undefined;
      const tool = params?.name;
      if (typeof tool === "string" && this.sink.toolIdOf(tool) !== undefined) {
        this.admit(message, tool, params, extra);
        return;
      }
    }
    if (isJSONRPCNotification(message) && message.method === "notifications/cancelled") {
      const held = this.held.get((message.params as { requestId?: RequestId } | undefined)?.requestId ?? "");
      if (held) held.cancelled = true;
    }
    this.onmessage?.(message, extra);
  }

  private admit(request: JSONRPCRequest, tool: string, params: ToolCallParams | undefined, extra?: MessageExtraInfo): void {
    const entry = { cancelled: false };
    this.held.set(request.id, entry);
    const peer = this.inner.sessionId !== undefined ? `mcp-session:${this.inner.sessionId}` : "mcp";
    this.sink.admit(tool, params, peer).then(
      (call) => {
        this.held.delete(request.id);
        if (entry.cancelled) return;
        // The SDK hands the handler this very object as `extra._meta`: keycapCallOf(extra) finds the call by it.
        if (call && typeof params?._meta === "object" && params._meta !== null) rememberCall(params._meta, call);
        this.onmessage?.(request, extra);
      },
      (err: unknown) => {
        this.held.delete(request.id);
        if (entry.cancelled) return;
        const e =
          err instanceof McpError ? err : this.sink.mcpError(refuse(Reasons.INTERNAL, "the MCP sink failed to admit the call"), this.sink.toolIdOf(tool) ?? "");
        const data: unknown = e.data;
        this.inner
          .send({ jsonrpc: "2.0", id: request.id, error: { code: e.code, message: e.message, ...(data !== undefined ? { data } : {}) } })
          .catch((sendErr: unknown) => this.onerror?.(sendErr instanceof Error ? sendErr : new Error(String(sendErr))));
      },
    );
  }
}
