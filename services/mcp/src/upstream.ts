/**
 * One upstream MCP server, as the gateway's MCP client sees it: started as a child process
 * with stdio as its transport (the official SDK's `Client` + `StdioClientTransport`).
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { getDefaultEnvironment, StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import type { CallToolResult, ServerCapabilities, Tool } from "@modelcontextprotocol/sdk/types.js";
import type { Logger } from "../../common/src/logger";
import type { UpstreamTool } from "./governed-tools";
import type { UpstreamPolicy } from "./policy";

/** The gateway's name and version toward upstreams (and toward the host). */
export const GATEWAY_IMPLEMENTATION = { name: "keycap-mcp", version: "0.1.0" };

export class Upstream {
  private constructor(
    readonly name: string,
    readonly client: Client,
    private readonly transport: StdioClientTransport,
  ) {}

  /** Starts the upstream server and completes MCP's initialize handshake with it. */
  static async connect(policy: UpstreamPolicy, logger: Logger): Promise<Upstream> {
    const transport = new StdioClientTransport({
      command: policy.command,
      args: policy.args,
      env: { ...getDefaultEnvironment(), ...policy.env },
      ...(policy.cwd !== undefined ? { cwd: policy.cwd } : {}),
      // The upstream's own log lines go to the gateway's stderr; stdout is the protocol.
      stderr: "inherit",
    });
    const client = new Client(GATEWAY_IMPLEMENTATION, { capabilities: {} });
    try {
      await client.connect(transport);
    } catch (err) {
      await transport.close().catch(() => undefined);
      throw new Error(
        `upstream ${policy.name} (${[policy.command, ...policy.args].join(" ")}) did not start as an MCP server: ${err instanceof Error ? err.message : String(err)}`,
      );
    }
    logger.info({ upstream: policy.name, server: client.getServerVersion(), upstreamPid: transport.pid }, "mcp: upstream connected");
    return new Upstream(policy.name, client, transport);
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
  async callTool(name: string, args: Record<string, unknown>, meta: Record<string, unknown>, timeoutMs: number): Promise<CallToolResult> {
    const result = await this.client.callTool({ name, arguments: args, _meta: meta }, undefined, { timeout: timeoutMs });
    // A CallToolResult (not the pre-2024-11 `toolResult` shape, which no current server sends).
    if (!Array.isArray(result["content"])) throw new Error(`upstream ${this.name} answered tools/call ${name} without content`);
    return result as CallToolResult;
  }

  async close(): Promise<void> {
    await this.client.close().catch(() => undefined);
  }
}
