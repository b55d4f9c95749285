/**
 * The gateway toward the host over MCP's Streamable HTTP transport (the SDK's
 * `StreamableHTTPServerTransport`, stateful: one MCP session, and one `Server`, per host
 * connection, all sharing one call path). The project's listener rule (DESIGN §9): plaintext
 * and without a credential on loopback only; off loopback the start requires HTTPS and a bearer
 * token that every request must carry. Without a token, DNS-rebinding protection admits only
 * requests whose Host header names the bound address (a web page cannot reach the gateway).
 */
import { randomUUID } from "node:crypto";
import * as fs from "node:fs";
import * as http from "node:http";
import * as https from "node:https";
import type { AddressInfo } from "node:net";
import type { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";
import { BearerSecret } from "../../common/src/bearer-secret";
import { ConfigError, type HostPort } from "../../common/src/config";
import type { Logger } from "../../common/src/logger";
import { Reasons } from "../../common/src/refuse";

/** The path the MCP endpoint is served at. */
export const MCP_PATH = "/mcp";
const MAX_BODY_BYTES = 4 * 1024 * 1024;
const LOOPBACK = new Set(["127.0.0.1", "::1", "localhost"]);

/** HTTPS and the host credential (mcp-options.ts); both are required off loopback. */
export interface HttpSecurity {
  tls?: { certFile: string; keyFile: string } | undefined;
  token?: string | undefined;
  /** Records a refused request in keycap's refusal store (never throws). */
  onRefusal?: (reason: string, message: string, peer: string) => Promise<void>;
}

export interface HttpListener {
  /** host:port actually bound. */
  address: string;
  /** "https" with TLS, else "http". */
  scheme: "http" | "https";
  close(): Promise<void>;
}

/** Serves MCP on `http://<listen>/mcp`; `newServer` makes the MCP server of each new session. */
export async function listenStreamableHttp(
  listen: HostPort,
  setting: string,
  newServer: () => Server,
  logger: Logger,
  security: HttpSecurity = {},
): Promise<HttpListener> {
  assertListenable(listen, setting, security);
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  let allowedHosts: string[] = [];
  const hostToken = security.token === undefined ? undefined : new BearerSecret(security.token);
  const onRequest: http.RequestListener = (req, res) => {
    void handle(req, res).catch((err: unknown) => {
      logger.error({ err: err instanceof Error ? err.message : String(err) }, "mcp: HTTP request failed");
      if (!res.headersSent) res.writeHead(500).end();
    });
  };
  const server = security.tls
    ? https.createServer({ cert: fs.readFileSync(security.tls.certFile), key: fs.readFileSync(security.tls.keyFile) }, onRequest)
    : http.createServer(onRequest);
  const handle = async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    if (new URL(req.url ?? "/", "http://x").pathname !== MCP_PATH) return void res.writeHead(404).end();
    if (hostToken) {
      const refused = credentialRefusal(req.headers.authorization, hostToken);
      if (refused) {
        const peer = `${req.socket.remoteAddress ?? ""}:${req.socket.remotePort ?? ""}`;
        const message =
          refused === Reasons.PRINCIPAL_CREDENTIAL_MISSING
            ? "this MCP endpoint needs authorization: Bearer <token> (the gateway's KEYCAP_MCP_TOKEN)"
            : "the credential is not this MCP endpoint's token";
        logger.warn({ reason: refused, peer }, "mcp: HTTP request refused");
        await security.onRefusal?.(refused, message, peer);
        res.setHeader("www-authenticate", 'Bearer realm="keycap-mcp"');
        return void jsonRpcError(res, 401, message, -32001, { reason: refused, domain: "keycap.dev" });
      }
    }
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
      // With a token a page cannot make the request count (it has no token); without one the
      // Host must name the bound address.
      enableDnsRebindingProtection: hostToken === undefined,
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
    scheme: security.tls ? "https" : "http",
    close: async () => {
      await Promise.all([...sessions.values()].map((t) => t.close().catch(() => undefined)));
      await new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
    },
  };
}

/**
 * Refuses a listen address off loopback unless the listener has HTTPS and a host credential
 * (checked at the start, before anything is started).
 */
export function assertListenable(listen: HostPort, setting: string, security: HttpSecurity): void {
  if (LOOPBACK.has(listen.host) || (security.tls && security.token)) return;
  const missing = [
    ...(security.tls ? [] : ["TLS (KEYCAP_MCP_TLS_CERT_FILE and KEYCAP_MCP_TLS_KEY_FILE, or KEYCAP_TLS_CERT_FILE and KEYCAP_TLS_KEY_FILE)"]),
    ...(security.token ? [] : ["a credential hosts present (KEYCAP_MCP_TOKEN or KEYCAP_MCP_TOKEN_FILE)"]),
  ];
  throw new ConfigError(setting, `${listen.host} is not a loopback address; off loopback the MCP listener needs ${missing.join(" and ")}`);
}

/** Why a request's credential is refused, or undefined when it is the host token. */
function credentialRefusal(header: string | undefined, token: BearerSecret): string | undefined {
  const checked = token.check(header === undefined ? [] : [header]);
  if (checked === "missing") return Reasons.PRINCIPAL_CREDENTIAL_MISSING;
  return checked === "invalid" ? Reasons.PRINCIPAL_CREDENTIAL_INVALID : undefined;
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

function jsonRpcError(res: http.ServerResponse, status: number, message: string, code = -32000, data?: Record<string, string>): void {
  res
    .writeHead(status, { "content-type": "application/json" })
    .end(JSON.stringify({ jsonrpc: "2.0", error: { code, message, ...(data ? { data } : {}) }, id: null }));
}
