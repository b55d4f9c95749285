/**
 * Issue 28, the MCP gateway toward the host over Streamable HTTP: `keycap mcp --http
 * 127.0.0.1:0` serves MCP at /mcp, each host connection its own MCP session, all sessions
 * sharing one call path, so duplicates from two hosts are still one upstream effect. Off
 * loopback it starts only with HTTPS and a host token, which every request must carry.
 */
import { expect } from "chai";
import { spawn, type ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as readline from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { startLedgerStack, type LedgerStack } from "./support/ledger-harness";
import { readEvents } from "./support/counting-mcp-server";
import { connectHost, countingPolicy, writePolicy } from "./support/mcp-host";
import { CLI_ENTRY, runCli, TEST_RUNTIME_TOKEN } from "./support/processes";
import { createTestPki } from "./support/tls-certs";
import { Agent, fetch as undiciFetch } from "undici";

describe("MCP gateway over Streamable HTTP (issue 28)", function () {
  this.timeout(60_000);
  let s: LedgerStack;
  let dir: string;
  let stateFile: string;
  let policyFile: string;
  let env: Record<string, string>;
  let gateway: ChildProcess | undefined;
  let url: URL;
  let metricsAddress = "";
  let output = "";
  let stdout = "";

  before(async function () {
    s = await startLedgerStack();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-mcp-http-"));
    stateFile = path.join(dir, "effects.jsonl");
    policyFile = writePolicy(dir, "policy.yaml", countingPolicy(stateFile, "      create_order: { class: idempotent, key: [/order_id] }", "web"));
    env = { PATH: process.env["PATH"] ?? "", ...s.env, KEYCAP_KERNEL_ADDRESS: s.kernel.endpoints.kernel!, KEYCAP_RUNTIME_TOKEN: TEST_RUNTIME_TOKEN };
    const child = spawn(process.execPath, [CLI_ENTRY, "mcp", "--policy", policyFile, "--http", "127.0.0.1:0"], {
      env: { ...env, KEYCAP_METRICS_LISTEN: "127.0.0.1:0" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    gateway = child;
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    url = await new Promise<URL>((resolve, reject) => {
      child.once("exit", (code) => reject(new Error(`keycap mcp exited ${code}:\n${output}`)));
      readline.createInterface({ input: child.stderr }).on("line", (line) => {
        output += line + "\n";
        try {
          const rec = JSON.parse(line) as { msg?: string; http?: string; metrics?: string };
          if (rec.msg === "ready" && rec.http) {
            metricsAddress = rec.metrics ?? "";
            resolve(new URL(rec.http));
          }
        } catch {
          // the upstream's own lines
        }
      });
    });
  });

  after(async function () {
    if (gateway && gateway.exitCode === null) {
      const exited = new Promise((r) => gateway!.once("exit", r));
      gateway.kill("SIGTERM");
      await exited;
    }
    await s?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  async function host(): Promise<Client> {
    const client = new Client({ name: "keycap-test-http-host", version: "1.0.0" });
    await client.connect(new StreamableHTTPClientTransport(url));
    return client;
  }

  it("serves MCP on loopback at /mcp, and two hosts' 40 identical calls are one upstream effect with one result, counted in its metrics as 1 sent and 39 replayed", async function () {
    expect(url.hostname).to.equal("127.0.0.1");
    expect(url.pathname).to.equal("/mcp");
    const [a, b] = await Promise.all([host(), host()]);
    try {
      const args = { order_id: "o-http", amount: 10, delay_ms: 200 };
      const calls = [a, b].flatMap((c) => Array.from({ length: 20 }, () => c.callTool({ name: "create_order", arguments: args }) as Promise<CallToolResult>));
      const results = await Promise.all(calls);
      expect(new Set(results.map((r) => JSON.stringify(r.content))).size).to.equal(1);
      expect(results.filter((r) => r._meta?.["io.keycap/replay"] === false)).to.have.length(1);
      expect(readEvents(stateFile).filter((e) => e.event === "request" && e.args["order_id"] === "o-http")).to.have.length(1);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
    expect(gateway?.exitCode, "stdout stays empty over HTTP too").to.equal(null);
    const scraped = await (await fetch(`http://${metricsAddress}/metrics`)).text();
    expect(scraped).to.include('keycap_mcp_calls_total{tool="mcp:web/create_order",outcome="sent"} 1\n');
    expect(scraped).to.include('keycap_mcp_calls_total{tool="mcp:web/create_order",outcome="replayed"} 39\n');
    expect(stdout).to.equal("");
  });

  it("fronts an upstream given by URL: a stdio gateway in front of this one sends each key once", async function () {
    const remote = writePolicy(
      dir,
      "remote.yaml",
      [
        "version: 1",
        "upstreams:",
        "  remote:",
        `    url: ${JSON.stringify(url.href)}`,
        "    tools:",
        "      create_order: { class: idempotent, key: [/order_id] }",
        "",
      ].join("\n"),
    );
    const h = await connectHost(remote, env);
    try {
      const args = { order_id: "o-chained", amount: 3 };
      const first = (await h.client.callTool({ name: "create_order", arguments: args })) as CallToolResult;
      const again = (await h.client.callTool({ name: "create_order", arguments: args })) as CallToolResult;
      expect(again.content).to.deep.equal(first.content);
      expect(again._meta?.["io.keycap/replay"]).to.equal(true);
      const requests = readEvents(stateFile).filter((e) => e.event === "request" && e.args["order_id"] === "o-chained");
      expect(requests).to.have.length(1);
    } finally {
      await h.close();
    }
  });

  it("refuses to listen off loopback without TLS and a host token, naming what is missing, before starting anything", async function () {
    const r = await runCli(["mcp", "--policy", policyFile, "--http", "0.0.0.0:0"], env);
    expect(r.code).to.equal(2);
    expect(r.stderr).to.include("--http: 0.0.0.0 is not a loopback address");
    expect(r.stderr).to.include("KEYCAP_MCP_TLS_CERT_FILE").and.include("KEYCAP_MCP_TOKEN");
    expect(r.stderr).to.not.include("upstream connected");
    const pki = createTestPki(fs.mkdtempSync(path.join(dir, "pki-")));
    const tlsOnly = await runCli(["mcp", "--policy", policyFile, "--http", "0.0.0.0:0"], {
      ...env,
      KEYCAP_MCP_TLS_CERT_FILE: pki.server.cert,
      KEYCAP_MCP_TLS_KEY_FILE: pki.server.key,
    });
    expect(tlsOnly.code).to.equal(2);
    expect(tlsOnly.stderr).to.include("KEYCAP_MCP_TOKEN").and.not.include("KEYCAP_MCP_TLS_CERT_FILE");
  });

  it("off loopback with HTTPS and a host token: a host with the token is served; without it, or with another, 401 with keycap's reason", async function () {
    const pki = createTestPki(fs.mkdtempSync(path.join(dir, "pki-")));
    const token = `mcp-host-token-${Date.now()}-0123456789`;
    const child = spawn(process.execPath, [CLI_ENTRY, "mcp", "--policy", policyFile, "--http", "0.0.0.0:0"], {
      env: { ...env, KEYCAP_MCP_TLS_CERT_FILE: pki.server.cert, KEYCAP_MCP_TLS_KEY_FILE: pki.server.key, KEYCAP_MCP_TOKEN: token },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let log = "";
    try {
      const at = await new Promise<URL>((resolve, reject) => {
        child.once("exit", (code) => reject(new Error(`keycap mcp exited ${code}:\n${log}`)));
        readline.createInterface({ input: child.stderr }).on("line", (line) => {
          log += line + "\n";
          const rec = (() => {
            try {
              return JSON.parse(line) as { msg?: string; http?: string };
            } catch {
              return {};
            }
          })();
          if (rec.msg === "ready" && rec.http) resolve(new URL(rec.http));
        });
      });
      expect(at.protocol).to.equal("https:");
      const mcp = new URL(`https://127.0.0.1:${at.port}${at.pathname}`);
      const agent = new Agent({ connect: { ca: fs.readFileSync(pki.ca.cert) } });
      const viaCa = ((url: string | URL, init?: RequestInit) => undiciFetch(url, { ...(init as object), dispatcher: agent })) as unknown as typeof fetch;
      const client = new Client({ name: "keycap-test-https-host", version: "1.0.0" });
      await client.connect(new StreamableHTTPClientTransport(mcp, { fetch: viaCa, requestInit: { headers: { authorization: `Bearer ${token}` } } }));
      try {
        const r = (await client.callTool({ name: "create_order", arguments: { order_id: "o-https", amount: 1 } })) as CallToolResult;
        expect(r.isError).to.not.equal(true);
      } finally {
        await client.close();
      }
      const initialize = {
        jsonrpc: "2.0",
        id: 1,
        method: "initialize",
        params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "x", version: "1" } },
      };
      for (const [authorization, reason] of [
        [undefined, "PRINCIPAL_CREDENTIAL_MISSING"],
        [`Bearer ${token}x`, "PRINCIPAL_CREDENTIAL_INVALID"],
      ] as const) {
        const res = await viaCa(mcp, {
          method: "POST",
          headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...(authorization ? { authorization } : {}) },
          body: JSON.stringify(initialize),
        });
        expect(res.status).to.equal(401);
        expect(res.headers.get("www-authenticate")).to.match(/^Bearer /);
        expect(((await res.json()) as { error: { data: { reason: string } } }).error.data.reason).to.equal(reason);
      }
      expect(log, "the token is never logged").to.not.include(token);
      // Recorded like every listener's refusals, under service "mcp".
      const { rejections } = await s.admin.listRejections({ service: "mcp", pageSize: 10 });
      expect(rejections.map((r) => r.reason).sort()).to.deep.equal(["PRINCIPAL_CREDENTIAL_INVALID", "PRINCIPAL_CREDENTIAL_MISSING"]);
    } finally {
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      await exited;
    }
  });
});
