/**
 * One upstream MCP server, as the gateway's MCP client sees it (the official SDK's `Client`):
 * started as a child process with stdio as its transport, or reached at a Streamable HTTP URL.
 * A connection that ends on its own (the upstream exited) is made again by the next call.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { getDefaultEnvironment, StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult, Progress, ServerCapabilities, Tool } from "@modelcontextprotocol/sdk/types.js";
import type { Logger } from "../../common/src/logger";
import type { UpstreamTool } from "./governed-tools";
import type { UpstreamPolicy } from "./policy";

/** Starts or reaches the upstream and completes MCP's initialize handshake. */
async function open(policy: UpstreamPolicy, logger: Logger): Promise<Client> {
  const t = policy.transport;
  const transport =
    t.kind === "http"
      ? new StreamableHTTPClientTransport(new URL(t.url))
      : new StdioClientTransport({
          command: t.command,
          args: t.args,
          env: { ...getDefaultEnvironment(), ...t.env },
          ...(t.cwd !== undefined ? { cwd: t.cwd } : {}),
          // The upstream's own log lines go to the gateway's stderr; stdout is the protocol.
          stderr: "inherit",
        });
  const client = new Client(GATEWAY_IMPLEMENTATION, { capabilities: {} });
  const what = t.kind === "http" ? t.url : [t.command, ...t.args].join(" ");
  try {
    await client.connect(transport);
  } catch (err) {
    await transport.close().catch(() => undefined);
    throw new Error(`upstream ${policy.name} (${what}) did not answer as an MCP server: ${err instanceof Error ? err.message : String(err)}`);
  }
  const where = transport instanceof StdioClientTransport ? { upstreamPid: transport.pid } : { url: what };
  logger.info({ upstream: policy.name, server: client.getServerVersion(), ...where }, "mcp: upstream connected");
  return client;
}

/** The gateway's name and version toward upstreams (and toward the host). */
export const GATEWAY_IMPLEMENTATION = { name: "keycap-mcp", version: "0.1.0" };

/** What of a host's request reaches the upstream besides the call: its progress notifications back, its cancellation forward. */
export interface Relay {
  onProgress?: (progress: Progress) => void;
  signal?: AbortSignal;
}

export class Upstream {
  private current: Client;
  /** The connection ended without the gateway closing it (the upstream exited, the HTTP server went away). */
  private lost = false;
  private closing = false;
  private reconnecting: Promise<Client> | undefined;
  private readonly hooks: ((client: Client) => void)[] = [];

  private constructor(
    readonly name: string,
    private readonly policy: UpstreamPolicy,
    private readonly logger: Logger,
    client: Client,
  ) {
    this.current = client;
    this.watch(client);
  }

  /** Starts (stdio) or reaches (Streamable HTTP) the upstream server and completes MCP's initialize handshake with it. */
  static async connect(policy: UpstreamPolicy, logger: Logger): Promise<Upstream> {
    return new Upstream(policy.name, policy, logger, await open(policy, logger));
  }

  /** The client of the current connection (for what does not reconnect by itself: see connected()). */
  get client(): Client {
    return this.current;
  }

  /** The current connection, started again first when the last one was lost. */
  connected(): Promise<Client> {
    if (!this.lost) return Promise.resolve(this.current);
    this.reconnecting ??= open(this.policy, this.logger)
      .then((client) => {
        this.current = client;
        this.lost = false;
        this.watch(client);
        for (const hook of this.hooks) hook(client);
        return client;
      })
      .finally(() => (this.reconnecting = undefined));
    return this.reconnecting;
  }

  /** Runs `hook` on this connection and on every one made after it (notification handlers). */
  onEachConnect(hook: (client: Client) => void): void {
    this.hooks.push(hook);
    hook(this.current);
  }

  private watch(client: Client): void {
    client.onclose = () => {
      if (this.closing || client !== this.current) return;
      this.lost = true;
      this.logger.warn({ upstream: this.name }, "mcp: the upstream connection ended; the next call starts it again");
    };
  }

  get capabilities(): ServerCapabilities | undefined {
    return this.client.getServerCapabilities();
  }

  /** Every tool the upstream lists (all pages). */
  async listTools(): Promise<UpstreamTool[]> {
    if (!this.capabilities?.tools) return [];
    const tools: Tool[] = [];
    let cursor: string | undefined;
    do {
      const page = await this.client.listTools(cursor !== undefined ? { cursor } : {});
      tools.push(...page.tools);
      cursor = page.nextCursor;
    } while (cursor !== undefined);
    return tools;
  }

  /** Sends one tools/call. Throws when no result came back (transport failure, timeout, a JSON-RPC error). */
  async callTool(name: string, args: Record<string, unknown>, meta: Record<string, unknown>, timeoutMs: number, relay: Relay = {}): Promise<CallToolResult> {
    const client = await this.connected();
    const result = await client.callTool({ name, arguments: args, _meta: meta }, undefined, {
      timeout: timeoutMs,
      ...(relay.onProgress ? { onprogress: relay.onProgress } : {}),
      ...(relay.signal ? { signal: relay.signal } : {}),
    });
    // A CallToolResult (not the pre-2024-11 `toolResult` shape, which no current server sends).
    if (!Array.isArray(result["content"])) throw new Error(`upstream ${this.name} answered tools/call ${name} without content`);
    return result as CallToolResult;
  }

  async close(): Promise<void> {
    this.closing = true;
    await this.current.close().catch(() => undefined);
  }
}
