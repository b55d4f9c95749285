/**
 * The MCP gateway benchmark (issue 28): `tools/call` of an Idempotent tool through
 * `keycap mcp` (begin with the kernel, claim the key in MongoDB, send, store, complete) against
 * the same call sent straight to the same upstream, at c = 1 and c = 16, as a ratio within one
 * run, with the gateway's CPU per call. Every call is a new key (a new order), so each one takes
 * the whole path; replays would be cheaper. Both sides are the official SDK client over stdio.
 *
 * Usage: node dist/bench/mcp-gateway.js [--calls N]   (default 400 per concurrency and side)
 * Writes bench/results/mcp-<time>.json and prints a table.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { projectRoot } from "../services/common/src/repo-paths";
import { cpuSecondsOf } from "./proc-sampler";
import { startStack } from "./stack";
import { summarise, type LatencySummary } from "./stats";

const UPSTREAM = path.join(projectRoot(), "dist/bench/mcp-upstream.js");
const CLI = path.join(projectRoot(), "dist/services/cli/src/main.js");

interface Side {
  callsPerSecond: number;
  latencyMs: LatencySummary;
}

interface Row {
  concurrency: number;
  calls: number;
  direct: Side;
  gateway: Side;
  /** gateway calls/s ÷ direct calls/s. */
  ratio: number;
  /** CPU the gateway process spent per call (µs), its upstream child not included. */
  gatewayCpuUsPerCall: number;
}

async function connect(command: string, args: string[], env: Record<string, string>): Promise<{ client: Client; pid: number }> {
  const transport = new StdioClientTransport({ command, args, env, stderr: "ignore" });
  const client = new Client({ name: "keycap-bench", version: "1.0.0" });
  await client.connect(transport);
  return { client, pid: transport.pid ?? 0 };
}

/** `calls` calls with `concurrency` in flight, each a new order id. */
async function drive(client: Client, label: string, calls: number, concurrency: number): Promise<Side> {
  const latencies: number[] = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < calls; i = next++) {
        const t = performance.now();
        const r = await client.callTool({ name: "create_order", arguments: { order_id: `${label}-${i}`, amount: 1 } });
        if (r.isError) throw new Error(`call ${label}-${i} failed: ${JSON.stringify(r.content)}`);
        latencies.push(performance.now() - t);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  return { callsPerSecond: calls / seconds, latencyMs: summarise(latencies) };
}

async function main(): Promise<void> {
  const n = Number(process.argv[process.argv.indexOf("--calls") + 1] ?? "");
  const calls = Number.isInteger(n) && n > 0 ? n : 400;
  const stack = await startStack();
  const policy = path.join(stack.dataDir, "mcp-policy.yaml");
  fs.writeFileSync(
    policy,
    [
      "version: 1",
      "upstreams:",
      "  bench:",
      `    command: ${JSON.stringify(process.execPath)}`,
      `    args: [${JSON.stringify(UPSTREAM)}]`,
      "    tools:",
      "      create_order: { class: idempotent, key: [/order_id] }",
      "",
    ].join("\n"),
  );
  const env = {
    PATH: process.env["PATH"] ?? "",
    HOME: process.env["HOME"] ?? "",
    MONGODB_URI: stack.mongo.uri,
    KEYCAP_MONGODB_DATABASE: `mcp_bench_${Date.now()}`,
    KEYCAP_DATA_DIR: stack.dataDir,
    KEYCAP_KERNEL_ADDRESS: stack.kernelAddress,
    KEYCAP_RUNTIME_TOKEN: stack.runtimeToken,
    KEYCAP_LOG_LEVEL: "warn",
  };
  const rows: Row[] = [];
  try {
    const direct = await connect(process.execPath, [UPSTREAM], env);
    const gateway = await connect(process.execPath, [CLI, "mcp", "--policy", policy], env);
    // Warm both paths (JIT, connections, the kernel's caches) before measuring.
    await drive(direct.client, "warm-d", 100, 8);
    await drive(gateway.client, "warm-g", 100, 8);
    for (const concurrency of [1, 16]) {
      const d = await drive(direct.client, `d${concurrency}`, calls, concurrency);
      const cpu0 = cpuSecondsOf(gateway.pid) ?? 0;
      const g = await drive(gateway.client, `g${concurrency}`, calls, concurrency);
      const cpu = (cpuSecondsOf(gateway.pid) ?? 0) - cpu0;
      rows.push({ concurrency, calls, direct: d, gateway: g, ratio: g.callsPerSecond / d.callsPerSecond, gatewayCpuUsPerCall: (cpu / calls) * 1e6 });
    }
    await Promise.all([direct.client.close(), gateway.client.close()]);
  } finally {
    await stack.stop();
  }
  const stamp = new Date()
    .toISOString()
    .replace(/[-:]/g, "")
    .replace(/\.\d+Z$/, "Z");
  const out = path.join(projectRoot(), "bench", "results", `mcp-${stamp}.json`);
  fs.writeFileSync(out, JSON.stringify({ backend: stack.mongo.backend, rows }, null, 2) + "\n");
  for (const r of rows) {
    process.stdout.write(
      `c=${r.concurrency}: direct ${r.direct.callsPerSecond.toFixed(0)}/s p50 ${r.direct.latencyMs.p50.toFixed(2)} ms p99 ${r.direct.latencyMs.p99.toFixed(2)} ms | ` +
        `gateway ${r.gateway.callsPerSecond.toFixed(0)}/s p50 ${r.gateway.latencyMs.p50.toFixed(2)} ms p99 ${r.gateway.latencyMs.p99.toFixed(2)} ms | ` +
        `ratio ${r.ratio.toFixed(3)} | gateway CPU ${r.gatewayCpuUsPerCall.toFixed(0)} µs/call\n`,
    );
  }
  process.stdout.write(`results: ${path.relative(projectRoot(), out)} (MongoDB backend: ${stack.mongo.backend})\n`);
}

void main().catch((err: unknown) => {
  process.stderr.write(`mcp bench: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
