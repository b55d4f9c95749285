/**
 * Issue 28, the MCP gateway: `keycap mcp` between a host (the official SDK client over stdio)
 * and an effect-counting upstream MCP server of keycap's own. An Idempotent tool's call is
 * forwarded once per kernel-derived key and replayed after; a crash with a call in flight is
 * recovered under the same key (an Unsafe call's becomes indeterminate and is never re-sent);
 * call-time refusals are MCP errors with keycap's reason, recorded against the tool id.
 */
import { expect } from "chai";
import { MongoClient } from "mongodb";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import {
  LoggingMessageNotificationSchema,
  PromptListChangedNotificationSchema,
  ResourceListChangedNotificationSchema,
  ToolListChangedNotificationSchema,
  McpError,
  type CallToolResult,
} from "@modelcontextprotocol/sdk/types.js";
import { startLedgerStack, type LedgerStack } from "./support/ledger-harness";
import { readEvents, type CountingEvent } from "./support/counting-mcp-server";
import { connectHost, countingPolicy, writePolicy, type McpHost } from "./support/mcp-host";
import { runCli, TEST_RUNTIME_TOKEN } from "./support/processes";

const POLICY_TOOLS = [
  "      create_order: { class: idempotent, key: [/order_id] }",
  "      send_message: { class: unsafe }",
  "      get_status: { class: read }",
].join("\n");

describe("MCP gateway (issue 28): one upstream effect per kernel-derived key, through keycap mcp", function () {
  this.timeout(120_000);
  let s: LedgerStack;
  let dir: string;
  let stateFile: string;
  let policyFile: string;
  let env: Record<string, string>;
  let host: McpHost | undefined;

  const events = (tool: string, match: (e: CountingEvent) => boolean = () => true): { requests: CountingEvent[]; effects: CountingEvent[] } => {
    const all = readEvents(stateFile).filter((e) => e.tool === tool && match(e));
    return { requests: all.filter((e) => e.event === "request"), effects: all.filter((e) => e.event === "effect") };
  };
  const order = (id: string) => (e: CountingEvent) => e.args["order_id"] === id;

  async function start(): Promise<McpHost> {
    host = await connectHost(policyFile, env);
    return host;
  }

  function call(h: McpHost, name: string, args: unknown, meta?: Record<string, unknown>): Promise<CallToolResult> {
    return h.client.callTool({ name, arguments: args as Record<string, unknown>, ...(meta ? { _meta: meta } : {}) }, undefined, {
      timeout: 30_000,
    }) as Promise<CallToolResult>;
  }

  async function until(what: string, check: () => boolean, ms = 10_000): Promise<void> {
    const end = Date.now() + ms;
    while (!check()) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  before(async function () {
    s = await startLedgerStack();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-mcp-"));
    stateFile = path.join(dir, "effects.jsonl");
    policyFile = writePolicy(dir, "policy.yaml", countingPolicy(stateFile, POLICY_TOOLS));
    env = {
      ...s.env,
      KEYCAP_KERNEL_ADDRESS: s.kernel.endpoints.kernel!,
      KEYCAP_RUNTIME_TOKEN: TEST_RUNTIME_TOKEN,
      KEYCAP_MCP_TIMEOUT_MS: "1500",
      KEYCAP_MCP_WAIT_MS: "10000",
    };
  });

  afterEach(async function () {
    if (this.currentTest?.state === "failed" && host) console.error(host.stderr().split("\n").slice(-30).join("\n"));
    await host?.close().catch(() => undefined);
    host = undefined;
  });

  after(async function () {
    await s?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it("offers the upstream's tools with the effect class the policy gives each", async function () {
    const h = await start();
    const { tools } = await h.client.listTools();
    const classes = Object.fromEntries(tools.map((t) => [t.name, t._meta?.["io.keycap/effect-class"]]));
    expect(classes).to.deep.equal({ create_order: "idempotent", send_message: "unsafe", get_status: "read" });
    expect(tools.find((t) => t.name === "create_order")?.annotations?.idempotentHint).to.equal(true);
  });

  it("sends 100 concurrent identical calls of an Idempotent tool upstream once, with the kernel's key and capability in _meta, and gives all 100 the same result", async function () {
    const h = await start();
    const args = { order_id: "o-100", amount: 1200, delay_ms: 300 };
    const results = await Promise.all(Array.from({ length: 100 }, () => call(h, "create_order", args)));
    const { requests, effects } = events("create_order", order("o-100"));
    expect(effects).to.have.length(1);
    expect(requests).to.have.length(1);
    const texts = new Set(results.map((r) => JSON.stringify(r.content)));
    expect([...texts]).to.deep.equal([JSON.stringify([{ type: "text", text: "order o-100 created as effect #1" }])]);
    expect(results.filter((r) => r._meta?.["io.keycap/replay"] === true)).to.have.length(99);
    const keys = new Set(results.map((r) => r._meta?.["io.keycap/idempotency-key"]));
    expect(keys.size).to.equal(1);
    const sent = requests[0]!.meta;
    expect(sent["io.keycap/idempotency-key"]).to.equal([...keys][0]);
    expect(sent["io.keycap/capability"])
      .to.be.a("string")
      .and.match(/^[\w-]+\.[\w-]+\.[\w-]+$/);
  });

  it("stores an isError result as the tool's answer and replays it without sending again", async function () {
    const h = await start();
    const first = await call(h, "create_order", { order_id: "o-declined", amount: 5, decline: true });
    const again = await call(h, "create_order", { order_id: "o-declined", amount: 5, decline: true });
    expect(first.isError).to.equal(true);
    expect(again.isError).to.equal(true);
    expect(again.content).to.deep.equal(first.content);
    expect(again._meta?.["io.keycap/replay"]).to.equal(true);
    expect(events("create_order", order("o-declined")).requests).to.have.length(1);
  });

  it("leaves the key retryable when the upstream gives no answer in time: the retry is sent again under the same key", async function () {
    const h = await start();
    const args = { order_id: "o-timeout", amount: 4, hang: true };
    const timedOut = await call(h, "create_order", args).catch((err: unknown) => err);
    expect(timedOut).to.be.instanceOf(McpError);
    expect((timedOut as McpError).data).to.deep.include({ reason: "UPSTREAM_UNAVAILABLE", tool_id: "mcp:counter/create_order" });
    const retried = await call(h, "create_order", args);
    expect(retried._meta?.["io.keycap/replay"]).to.equal(false);
    const { requests, effects } = events("create_order", order("o-timeout"));
    expect([requests.length, effects.length]).to.deep.equal([2, 1]);
    expect(requests[1]!.meta["io.keycap/idempotency-key"]).to.equal(requests[0]!.meta["io.keycap/idempotency-key"]);
  });

  it("starts an upstream that exited again on the next call: the call it lost leaves the key retryable, and the retry is sent under the same key", async function () {
    const h = await start();
    const args = { order_id: "o-upstream-died", amount: 8, crash_once: true };
    const lost = await call(h, "create_order", args).catch((err: unknown) => err);
    expect((lost as McpError).data).to.deep.include({ reason: "UPSTREAM_UNAVAILABLE" });
    const retried = await call(h, "create_order", args);
    expect(retried.isError).to.not.equal(true);
    const { requests, effects } = events("create_order", order("o-upstream-died"));
    expect([requests.length, effects.length]).to.deep.equal([2, 1]);
    expect(requests[1]!.meta["io.keycap/idempotency-key"]).to.equal(requests[0]!.meta["io.keycap/idempotency-key"]);
    expect(h.stderr()).to.include("the upstream connection ended");
  });

  it("gives a reconnecting host's retry the stored result, sending nothing upstream", async function () {
    const h = await start();
    const first = await call(h, "create_order", { order_id: "o-reconnect", amount: 7 });
    await h.close();
    const h2 = await start();
    const again = await call(h2, "create_order", { order_id: "o-reconnect", amount: 7 });
    expect(again.content).to.deep.equal(first.content);
    expect(again._meta?.["io.keycap/replay"]).to.equal(true);
    expect(again._meta?.["io.keycap/arguments-mismatch"]).to.equal(undefined);
    // Same key, other arguments: still the stored result (dedupe is by key only), flagged.
    const other = await call(h2, "create_order", { order_id: "o-reconnect", amount: 7, note: "not a key field" });
    expect(other.content).to.deep.equal(first.content);
    expect(other._meta?.["io.keycap/arguments-mismatch"]).to.equal(true);
    expect(events("create_order", order("o-reconnect")).requests).to.have.length(1);
  });

  it("after the gateway is SIGKILLed with an Idempotent call in flight, the host's retry on a restarted gateway is sent again under the same key: still one effect", async function () {
    const h = await start();
    const lost = call(h, "create_order", { order_id: "o-crash", amount: 9, hang: true }).catch((err: unknown) => err);
    await until("the upstream to receive the call", () => events("create_order", order("o-crash")).effects.length === 1);
    await h.kill();
    expect(await lost).to.be.instanceOf(Error);
    const h2 = await start();
    const retried = await call(h2, "create_order", { order_id: "o-crash", amount: 9, hang: true });
    expect(retried.isError).to.not.equal(true);
    expect(retried.content).to.deep.equal(events("create_order", order("o-crash")).effects[0]!.answer!.content);
    const { requests, effects } = events("create_order", order("o-crash"));
    expect(effects).to.have.length(1);
    expect(requests).to.have.length(2);
    expect(new Set(requests.map((r) => r.meta["io.keycap/idempotency-key"])).size).to.equal(1);
    const third = await call(h2, "create_order", { order_id: "o-crash", amount: 9 });
    expect(third._meta?.["io.keycap/replay"]).to.equal(true);
    expect(events("create_order", order("o-crash")).requests).to.have.length(2);
  });

  it("after the gateway is SIGKILLed with an Unsafe call in flight, the host's retry is not re-sent: a tool error says an operator must settle it", async function () {
    const h = await start();
    const args = { to: "ops@example.com", text: "deploy finished", hang: true };
    const lost = call(h, "send_message", args).catch((err: unknown) => err);
    await until("the upstream to receive the message", () => events("send_message").requests.length === 1);
    await h.kill();
    await lost;
    const h2 = await start();
    const retried = await call(h2, "send_message", args);
    expect(retried.isError).to.equal(true);
    const text = (retried.content[0] as { text: string }).text;
    expect(text)
      .to.match(/not sent/)
      .and.match(/keycap recover/)
      .and.match(/operator/);
    expect(events("send_message").requests).to.have.length(1);
    // And later: still not sent.
    const again = await call(h2, "send_message", args);
    expect(again.isError).to.equal(true);
    expect(events("send_message").requests).to.have.length(1);
  });

  it("leaves an Unsafe call that got no answer indeterminate, and sends an identical one again only once an operator has settled it (keycap recover, then keycap complete)", async function () {
    const h = await start();
    const args = { to: "oncall@example.com", text: "rollback started", hang: true };
    const count = (): number => events("send_message", (e) => e.args["to"] === "oncall@example.com").requests.length;
    // Sent, and unanswered past the gateway's timeout: whether it took effect is unknown.
    const timedOut = await call(h, "send_message", args).catch((err: unknown) => err);
    expect((timedOut as McpError).data).to.deep.include({ reason: "UPSTREAM_UNAVAILABLE" });
    const blocked = await call(h, "send_message", args);
    expect(blocked.isError).to.equal(true);
    expect(count()).to.equal(1);
    const lostCall = blocked._meta?.["io.keycap/indeterminate-call-id"];
    expect(lostCall).to.be.a("string");
    const cliEnv = { ...env, KEYCAP_ADMIN_TOKEN: s.adminToken };
    const recovered = await runCli(["recover", "--tool", "mcp:counter/send_message", "--kernel", s.kernel.endpoints.kernel!, "--json"], cliEnv);
    expect(recovered.stdout).to.include(String(lostCall));
    expect((await call(h, "send_message", args)).isError).to.equal(true);
    expect(count()).to.equal(1);
    const settled = await runCli(["complete", String(lostCall), "--outcome", "succeeded", "--kernel", s.kernel.endpoints.kernel!], cliEnv);
    expect(settled.code, settled.stderr).to.equal(0);
    // The same arguments: a new call now, sent (the upstream holds its answer past the gateway's timeout).
    const sent = await call(h, "send_message", args).catch((err: unknown) => err);
    expect((sent as McpError).data).to.deep.include({ reason: "UPSTREAM_UNAVAILABLE" });
    expect(count()).to.equal(2);
  });

  it("sends each Unsafe call that is not a retry of a lost one", async function () {
    const h = await start();
    await call(h, "send_message", { to: "a@example.com", text: "one" });
    await call(h, "send_message", { to: "a@example.com", text: "one" });
    expect(events("send_message", (e) => e.args["to"] === "a@example.com").effects).to.have.length(2);
  });

  it("scopes a tool's key by run when the policy says run_scope: the run id from _meta io.keycap/run-id, else KEYCAP_MCP_RUN_ID; with neither the call is refused RUN_ID_REQUIRED", async function () {
    const scoped = writePolicy(
      dir,
      "runs.yaml",
      countingPolicy(stateFile, "      create_order: { class: idempotent, key: [/order_id], run_scope: true }", "runs"),
    );
    const h = (host = await connectHost(scoped, env));
    const args = { order_id: "o-runs", amount: 1 };
    const refused = await call(h, "create_order", args).catch((err: unknown) => err);
    expect((refused as McpError).data).to.deep.include({ reason: "RUN_ID_REQUIRED", tool_id: "mcp:runs/create_order" });
    const a = await call(h, "create_order", args, { "io.keycap/run-id": "run-a" });
    const a2 = await call(h, "create_order", args, { "io.keycap/run-id": "run-a" });
    const b = await call(h, "create_order", args, { "io.keycap/run-id": "run-b" });
    expect([a._meta?.["io.keycap/replay"], a2._meta?.["io.keycap/replay"], b._meta?.["io.keycap/replay"]]).to.deep.equal([false, true, false]);
    expect(b._meta?.["io.keycap/idempotency-key"]).to.not.equal(a._meta?.["io.keycap/idempotency-key"]);
    await h.close();
    const h2 = (host = await connectHost(scoped, { ...env, KEYCAP_MCP_RUN_ID: "run-a" }));
    const byDefault = await call(h2, "create_order", args);
    expect(byDefault._meta?.["io.keycap/replay"]).to.equal(true);
    expect(byDefault.content).to.deep.equal(a.content);
    expect(events("create_order", order("o-runs")).effects).to.have.length(2);
  });

  it("replays a stored result for KEYCAP_MCP_RESULT_TTL_SECONDS; after that the same key is sent again (retention)", async function () {
    const h = (host = await connectHost(policyFile, { ...env, KEYCAP_MCP_RESULT_TTL_SECONDS: "1" }));
    const args = { order_id: "o-expiring", amount: 6 };
    const first = await call(h, "create_order", args);
    const kept = await call(h, "create_order", args);
    expect([first._meta?.["io.keycap/replay"], kept._meta?.["io.keycap/replay"]]).to.deep.equal([false, true]);
    const mongo = await MongoClient.connect(env["MONGODB_URI"]!);
    try {
      const slots = mongo.db(env["KEYCAP_MONGODB_DATABASE"]).collection<{ _id: string }>("mcp_results");
      const slot = `key:${String(first._meta?.["io.keycap/idempotency-key"])}`;
      expect(await slots.findOne({ _id: slot })).to.not.equal(null);
      for (let i = 0; await slots.findOne({ _id: slot }); i++) {
        if (i > 100) throw new Error("the stored result did not expire");
        await new Promise((r) => setTimeout(r, 50));
      }
    } finally {
      await mongo.close();
    }
    const after = await call(h, "create_order", args);
    expect(after._meta?.["io.keycap/replay"]).to.equal(false);
    expect(events("create_order", order("o-expiring")).requests).to.have.length(2);
  });

  it("relays the upstream's progress notifications to the host that sent the call, and the upstream's log messages to the host", async function () {
    const h = await start();
    const logs: unknown[] = [];
    h.client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => void logs.push(n.params.data));
    const progress: number[] = [];
    const result = (await h.client.callTool({ name: "create_order", arguments: { order_id: "o-progress", amount: 2, progress_steps: 3 } }, undefined, {
      onprogress: (p) => void progress.push(p.progress),
    })) as CallToolResult;
    expect(result.isError).to.not.equal(true);
    expect(progress).to.deep.equal([1, 2, 3]);
    await until("the upstream's log message", () => logs.length > 0);
    expect(logs).to.deep.equal(["order o-progress: 3 steps done"]);
  });

  it("passes the upstream's resource and prompt list_changed on to the host, and logs a tools list_changed with the restart that takes it", async function () {
    const h = await start();
    expect(h.client.getServerCapabilities()?.resources?.listChanged).to.equal(true);
    expect(h.client.getServerCapabilities()?.prompts?.listChanged).to.equal(true);
    const seen: string[] = [];
    h.client.setNotificationHandler(ResourceListChangedNotificationSchema, () => void seen.push("resources"));
    h.client.setNotificationHandler(PromptListChangedNotificationSchema, () => void seen.push("prompts"));
    h.client.setNotificationHandler(ToolListChangedNotificationSchema, () => void seen.push("tools"));
    await h.client.callTool({ name: "get_status", arguments: { announce_changes: true } });
    await until("both list_changed notifications", () => seen.includes("resources") && seen.includes("prompts"));
    await until("the gateway's log line", () => /says its tools changed; .*restart keycap mcp/.test(h.stderr()));
    // Governed tools are not changed under the host: no tools list_changed reached it.
    expect(seen).to.not.include("tools");
  });

  it("refuses at call time, with keycap's reason in the MCP error and recorded against the tool id: a missing key field, arguments that are not an object", async function () {
    const h = await start();
    const refusal = async (args: unknown): Promise<{ reason: string; tool_id: string }> => {
      const err = await call(h, "create_order", args).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).to.be.instanceOf(McpError);
      return (err as McpError).data as { reason: string; tool_id: string };
    };
    const missing = await refusal({ amount: 3 });
    const notObject = await refusal([1, 2, 3]);
    expect(missing.tool_id).to.equal("mcp:counter/create_order");
    // The upstream's input schema (the kernel's argument schema) requires order_id: its check names the field first.
    expect(missing.reason).to.equal("ARGUMENTS_SCHEMA_VIOLATION");
    expect(notObject.reason).to.equal("ARGUMENTS_NOT_OBJECT");
    const rows = await s.admin.listRejections({ service: "kernel", toolId: "mcp:counter/create_order" });
    const reasons = rows.rejections.map((r) => r.reason);
    expect(reasons).to.include(missing.reason).and.include(notObject.reason);
    expect(events("create_order", (e) => e.args["amount"] === 3)).to.deep.equal({ requests: [], effects: [] });
  });
});
