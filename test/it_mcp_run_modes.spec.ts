/**
 * Run modes at the MCP gateway (issue 30, ADR 0028, 0029): `keycap mcp` between a host (the
 * official SDK client over stdio) and effect-counting upstream MCP servers, on real kernel and
 * ledger processes and a real MongoDB-protocol server. A recorded live run replayed through
 * the gateway gets every Idempotent and Queryable call's recorded result with 0 upstream tool
 * calls and nothing new stored; the Unsafe call is denied and recorded; a changed argument
 * diverges; a shadow run beside a live run sends nothing upstream and leaves its would-be
 * calls in the ledger's shadow store.
 */
import { expect } from "chai";
import { MongoClient, type Db } from "mongodb";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { ErrorCode, McpError, type CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { KernelClient } from "../clients/ts/src";
import { startLedgerStack, type LedgerStack } from "./support/ledger-harness";
import { readEvents } from "./support/counting-mcp-server";
import { COUNTING_SERVER, connectHost, writePolicy, type McpHost } from "./support/mcp-host";
import { TEST_RUNTIME_TOKEN } from "./support/processes";

const ORDER = "counter__create_order";
const MESSAGE = "counter__send_message";
const LOOKUP = "notes__send_message";

/** Two counting upstreams: `counter` (an Idempotent and an Unsafe tool) and `notes` (a Queryable one). */
function policy(counterState: string, notesState: string): string {
  const upstream = (name: string, state: string, tools: string[]): string[] => [
    `  ${name}:`,
    `    command: ${JSON.stringify(process.execPath)}`,
    `    args: [${JSON.stringify(COUNTING_SERVER)}]`,
    `    env: { COUNTING_STATE_FILE: ${JSON.stringify(state)} }`,
    "    tools:",
    ...tools,
  ];
  return [
    "version: 1",
    "upstreams:",
    ...upstream("counter", counterState, ["      create_order: { class: idempotent, key: [/order_id] }", "      send_message: { class: unsafe }"]),
    ...upstream("notes", notesState, ["      send_message: { class: queryable, request_id: /text }", "      create_order: { class: unsafe }"]),
    "",
  ].join("\n");
}

describe("MCP gateway run modes (issue 30): replay and shadow calls are never sent upstream", function () {
  this.timeout(120_000);
  let s: LedgerStack;
  let dir: string;
  let states: string[];
  let policyFile: string;
  let env: Record<string, string>;
  let host: McpHost | undefined;
  let mongo: MongoClient;
  let db: Db;
  /** Upstream tools/call requests received, over both upstreams. */
  const upstreamCalls = (): number => states.flatMap((f) => readEvents(f)).filter((e) => e.event === "request").length;
  const count = (collection: string): Promise<number> => db.collection(collection).countDocuments({});

  async function start(extra: Record<string, string> = {}): Promise<McpHost> {
    await host?.close().catch(() => undefined);
    host = await connectHost(policyFile, { ...env, ...extra });
    return host;
  }

  function call(h: McpHost, name: string, args: Record<string, unknown>, meta: Record<string, unknown>): Promise<CallToolResult> {
    return h.client.callTool({ name, arguments: args, _meta: meta }, undefined, { timeout: 30_000 }) as Promise<CallToolResult>;
  }

  /** A refusal's `data`; every sandbox refusal is InvalidParams (not to be retried as sent). */
  async function refused(p: Promise<unknown>): Promise<{ reason: string; tool_id: string; metadata: Record<string, string> }> {
    const err = await p.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).to.be.instanceOf(McpError);
    expect((err as McpError).code).to.equal(ErrorCode.InvalidParams);
    return (err as McpError).data as { reason: string; tool_id: string; metadata: Record<string, string> };
  }

  /** The recorded live run: an order, a Queryable lookup, an Unsafe message, another order. */
  const recorded = { runId: "mcp-rec", results: [] as CallToolResult[] };
  const run = [
    { tool: ORDER, args: { order_id: "M-1", amount: 5 } },
    { tool: LOOKUP, args: { to: "ops", text: "q-1" } },
    { tool: MESSAGE, args: { to: "bob", text: "hi" } },
    { tool: ORDER, args: { order_id: "M-2", amount: 7 } },
  ];
  const replayMeta = (runId: string) => ({ "io.keycap/run-id": runId, "io.keycap/run-mode": "replay", "io.keycap/replay-of": recorded.runId });

  before(async function () {
    s = await startLedgerStack();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-mcp-modes-"));
    states = [path.join(dir, "counter.jsonl"), path.join(dir, "notes.jsonl")];
    policyFile = writePolicy(dir, "policy.yaml", policy(states[0]!, states[1]!));
    env = {
      ...s.env,
      KEYCAP_KERNEL_ADDRESS: s.kernel.endpoints.kernel!,
      KEYCAP_LEDGER_ADDRESS: s.ledger.endpoints.ledger!,
      KEYCAP_RUNTIME_TOKEN: TEST_RUNTIME_TOKEN,
      KEYCAP_MCP_TIMEOUT_MS: "5000",
    };
    mongo = await MongoClient.connect(s.env["MONGODB_URI"]!);
    db = mongo.db(s.env["KEYCAP_MONGODB_DATABASE"]!);
    const h = await start();
    for (const c of run) recorded.results.push(await call(h, c.tool, c.args, { "io.keycap/run-id": recorded.runId }));
    expect(upstreamCalls()).to.equal(run.length);
  });

  afterEach(async function () {
    if (this.currentTest?.state === "failed" && host) console.error(host.stderr().split("\n").slice(-30).join("\n"));
  });

  after(async function () {
    await host?.close().catch(() => undefined);
    await mongo?.close();
    await s?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it("replays the recorded run with the same calls: every Idempotent and Queryable call gets its recorded result, 0 upstream calls, nothing new stored; the Unsafe call is denied and recorded", async function () {
    const h = await start();
    const before = { upstream: upstreamCalls(), results: await count("mcp_results"), entries: await count("entries") };
    for (const [i, c] of run.entries()) {
      if (c.tool === MESSAGE) {
        const denied = await refused(call(h, c.tool, c.args, replayMeta("mcp-rep-1")));
        expect([denied.reason, denied.tool_id, denied.metadata["position"]]).to.deep.equal(["SANDBOX_UNSAFE_DENIED", "mcp:counter/send_message", String(i)]);
        continue;
      }
      const result = await call(h, c.tool, c.args, replayMeta("mcp-rep-1"));
      const live = recorded.results[i]!;
      expect(result.content, `position ${i}`).to.deep.equal(live.content);
      expect(result._meta).to.deep.include({
        "io.keycap/replay": true,
        "io.keycap/run-mode": "replay",
        "io.keycap/recorded-call-id": live._meta?.["io.keycap/call-id"],
      });
      expect(result._meta?.["io.keycap/call-id"]).to.not.equal(live._meta?.["io.keycap/call-id"]);
    }
    expect(upstreamCalls(), "0 MCP upstream tool calls").to.equal(before.upstream);
    expect(await count("mcp_results")).to.equal(before.results);
    expect(await count("entries")).to.equal(before.entries);
    const denied = await s.admin.listRejections({ toolId: "mcp:counter/send_message", reason: "SANDBOX_UNSAFE_DENIED" });
    expect(denied.rejections.map((r) => r.service)).to.include("kernel");
  });

  it("refuses REPLAY_DIVERGED at the call whose argument changed, naming its position and the recorded call expected; nothing is sent", async function () {
    const h = await start();
    const before = upstreamCalls();
    const first = await call(h, ORDER, run[0]!.args, replayMeta("mcp-rep-2"));
    expect(first._meta?.["io.keycap/run-mode"]).to.equal("replay");
    const diverged = await refused(call(h, LOOKUP, { ...run[1]!.args, text: "q-changed" }, replayMeta("mcp-rep-2")));
    expect(diverged.reason).to.equal("REPLAY_DIVERGED");
    expect(diverged.metadata).to.include({
      position: "1",
      expected_call_id: recorded.results[1]!._meta?.["io.keycap/call-id"],
      expected_tool_id: "mcp:notes/send_message",
    });
    expect(upstreamCalls()).to.equal(before);
  });

  it("refuses REPLAY_NO_RECORDED_EFFECT when the recorded call was never answered through the gateway, and records it against the tool", async function () {
    // A recorded call begun outside the gateway (its result is not in the gateway's store).
    const kernel = new KernelClient(s.kernel.endpoints.kernel!);
    try {
      await kernel.beginCall("mcp:counter/create_order", JSON.stringify({ order_id: "M-9", amount: 1 }), { runId: "mcp-rec-9" });
    } finally {
      kernel.close();
    }
    const h = await start();
    const before = upstreamCalls();
    const meta = { "io.keycap/run-id": "mcp-rep-9", "io.keycap/run-mode": "replay", "io.keycap/replay-of": "mcp-rec-9" };
    const none = await refused(call(h, ORDER, { order_id: "M-9", amount: 1 }, meta));
    expect([none.reason, none.tool_id]).to.deep.equal(["REPLAY_NO_RECORDED_EFFECT", "mcp:counter/create_order"]);
    expect(upstreamCalls()).to.equal(before);
    const rows = await s.admin.listRejections({ service: "mcp", toolId: "mcp:counter/create_order", reason: "REPLAY_NO_RECORDED_EFFECT" });
    expect(rows.rejections).to.have.length(1);
  });

  it("runs a shadow run beside a live run: the live run's upstream effects exactly as without it, the shadow's would-be calls in the shadow store, Unsafe denied", async function () {
    const workload = [
      { tool: ORDER, args: { order_id: "SH-1", amount: 3 } },
      { tool: LOOKUP, args: { to: "ops", text: "q-sh" } },
    ];
    const h = await start();
    const before = { upstream: upstreamCalls(), shadow: await count("shadow_entries") };
    for (const w of workload) {
      const live = await call(h, w.tool, w.args, { "io.keycap/run-id": "mcp-live-4" });
      expect(live._meta?.["io.keycap/shadowed"]).to.equal(undefined);
    }
    const liveEvents = states.flatMap((f) => readEvents(f)).length;
    expect(upstreamCalls() - before.upstream).to.equal(workload.length);
    const shadowMeta = { "io.keycap/run-id": "mcp-shadow-4", "io.keycap/run-mode": "shadow", "io.keycap/shadows": "mcp-live-4" };
    for (const w of workload) {
      const shadowed = await call(h, w.tool, w.args, shadowMeta);
      expect(shadowed.isError).to.not.equal(true);
      expect(shadowed._meta).to.deep.include({ "io.keycap/shadowed": true, "io.keycap/run-mode": "shadow", "io.keycap/not-sent": true });
    }
    const denied = await refused(call(h, MESSAGE, { to: "bob", text: "shadow" }, shadowMeta));
    expect(denied.reason).to.equal("SANDBOX_UNSAFE_DENIED");
    expect(states.flatMap((f) => readEvents(f)).length, "no upstream request or effect from the shadow run").to.equal(liveEvents);
    const shadows = await db.collection<{ tool_id: string; call_id: string; payload: { buffer: Uint8Array } }>("shadow_entries").find({}).toArray();
    expect(shadows.length - before.shadow).to.equal(workload.length);
    const wouldBe = shadows.slice(before.shadow).map((d) => [d.tool_id, (JSON.parse(Buffer.from(d.payload.buffer).toString()) as { tool: string }).tool]);
    expect(wouldBe).to.have.deep.members([
      ["mcp:counter/create_order", "create_order"],
      ["mcp:notes/send_message", "send_message"],
    ]);
  });

  it("runs every call of a host that cannot set _meta in the gateway's mode (KEYCAP_MCP_RUN_MODE=shadow)", async function () {
    const h = await start({ KEYCAP_MCP_RUN_MODE: "shadow", KEYCAP_MCP_RUN_ID: "mcp-shadow-5" });
    const before = upstreamCalls();
    const shadowed = (await h.client.callTool({ name: ORDER, arguments: { order_id: "SH-5", amount: 1 } })) as CallToolResult;
    expect(shadowed._meta?.["io.keycap/shadowed"]).to.equal(true);
    expect(upstreamCalls()).to.equal(before);
  });
});
