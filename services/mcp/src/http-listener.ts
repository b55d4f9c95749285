/**
 * The gateway toward the host over MCP's Streamable HTTP transport (the SDK's
 * `StreamableHTTPServerTransport`, stateful: one MCP session, and one `Server`, per host
 * connection, all sharing one call path). Loopback only: off loopback the project's rule is
 * TLS and a credential, which this listener does not have yet, so the start refuses it.
 * DNS-rebinding protection admits only requests whose Host header names the bound address.
 */
import { randomUUID } from "node:crypto";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import type { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";
import { ConfigError, type HostPort } from "../../common/src/config";
import type { Logger } from "../../common/src/logger";

/** The path the MCP endpoint is served at. */
export const MCP_PATH = "/mcp";
const MAX_BODY_BYTES = 4 * 1024 * 1024;
const LOOPBACK = new Set(["127.0.0.1", "::1", "localhost"]);

export interface HttpListener {
  /** host:port actually bound. */
  address: string;
  close(): Promise<void>;
}

/** Serves MCP on `http://<listen>/mcp`; `newServer` makes the MCP server of each new session. */
export async function listenStreamableHttp(listen: HostPort, setting: string, newServer: () => Server, logger: Logger): Promise<HttpListener> {
  assertLoopback(listen, setting);
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  let allowedHosts: string[] = [];
  const server = http.createServer((req, res) => {
    void handle(req, res).catch((err: unknown) => {
      logger.error({ err: err instanceof Error ? err.message : String(err) }, "mcp: HTTP request failed");
      if (!res.headersSent) res.writeHead(500).end();
    });
  });
  const handle = async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    if (new URL(req.url ?? "/", "http://x").pathname !== MCP_PATH) return void res.writeHead(404).end();
    const id = req.headers["mcp-session-id"];
    const existing = typeof id === "string" ? sessions.get(id) : undefined;
    const body = req.method === "POST" ? await readJson(req) : undefined;
    if (body === "too-large") return void res.writeHead(413).end();
    if (req.method === "POST" && body === undefined) return void jsonRpcError(res, 400, "Parse error: the body is not JSON", -32700);
    if (existing) return existing.handleRequest(req, res, body);
    if (id !== undefined) return void jsonRpcError(res, 404, "Session not found");
    if (req.method !== "POST" || !isInitializeRequest(body)) return void jsonRpcError(res, 400, "Bad Request: no valid session id");
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (sid) => void sessions.set(sid, transport),
      enableDnsRebindingProtection: true,
      allowedHosts,
    });
    transport.onclose = () => {
      if (transport.sessionId !== undefined) sessions.delete(transport.sessionId);
    };
    await newServer().connect(transport);
    await transport.handleRequest(req, res, body);
  };
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(listen.port, listen.host, () => resolve());
  });
  const bound = server.address() as AddressInfo;
  const host = bound.family === "IPv6" ? `[${bound.address}]` : bound.address;
  allowedHosts = [`${host}:${bound.port}`, `localhost:${bound.port}`];
  return {
    address: `${host}:${bound.port}`,
    close: async () => {
      await Promise.all([...sessions.values()].map((t) => t.close().catch(() => undefined)));
      await new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
    },
  };
}

/** Refuses a listen address off loopback (checked at the start, before anything is started). */
export function assertLoopback(listen: HostPort, setting: string): void {
  if (!LOOPBACK.has(listen.host)) {
    throw new ConfigError(
      setting,
      `${listen.host} is not a loopback address; off loopback the MCP listener needs TLS and a credential, which it does not have yet`,
    );
  }
}

async function readJson(req: http.IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) return "too-large";
    chunks.push(chunk as Buffer);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch {
    return undefined;
  }
}

function jsonRpcError(res: http.ServerResponse, status: number, message: string, code = -32000): void {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify({ jsonrpc: "2.0", error: { code, message }, id: null }));
}
