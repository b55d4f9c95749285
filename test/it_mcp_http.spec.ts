/**
 * Issue 28, the MCP gateway toward the host over Streamable HTTP: `keycap mcp --http
 * 127.0.0.1:0` serves MCP at /mcp, each host connection its own MCP session, all sessions
 * sharing one call path, so duplicates from two hosts are still one upstream effect. Off
 * loopback it refuses to start (the listener has no TLS or credential yet).
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

  it("refuses to listen off loopback, before starting anything", async function () {
    const r = await runCli(["mcp", "--policy", policyFile, "--http", "0.0.0.0:0"], env);
    expect(r.code).to.equal(2);
    expect(r.stderr).to.include("--http: 0.0.0.0 is not a loopback address");
    expect(r.stderr).to.not.include("upstream connected");
  });
});
