/**
 * Run modes (issue 30, ADR 0028), end to end on real kernel and ledger processes and a
 * real MongoDB-protocol server: a recorded live run replayed (its recorded outcomes, no new
 * entry, Unsafe denied and recorded), a replay that diverges, a shadow run beside a live
 * run, sandbox capabilities at the TypeScript sink and at the ledger, and `keycap runs show`.
 */
import { status } from "@grpc/grpc-js";
import { expect } from "chai";
import { MongoClient, type Db } from "mongodb";
import * as path from "node:path";
import { KernelClient, LedgerClient, Runtime } from "../clients/ts/src";
import { RunMode, type BeginCallRequest, type BeginCallResponse } from "../gen/ts/keycap/kernel/v1/kernel";
import { errorOf } from "../clients/ts/src/call-coalescer";
import { callUnary } from "../clients/ts/src/rpc";
import { CapabilityMinter } from "../services/kernel/src/capability-minter";
import { loadOrCreateSigningKeys } from "../services/kernel/src/signing-keys";
import { RemoteJwksSource } from "../services/capability/src";
import { InMemorySpentStore, Sink } from "../services/sink/src";
import { KeycapError } from "../services/common/src/errors";
import { charge, notify, tools, transfer } from "./support/acceptance-tools";
import { refusal } from "./support/refusal";
import { runCli, serviceEnv, startService, TEST_RUNTIME_TOKEN, type ServiceProcess } from "./support/processes";

const ADMIN_TOKEN = "run-modes-admin-token-0123456789";

describe("run modes: live, shadow, replay (issue 30, ADR 0028)", function () {
  this.timeout(120_000);
  let proc: ServiceProcess;
  let env: Record<string, string>;
  let kernel: KernelClient;
  let mongo: MongoClient;
  let db: Db;
  /** The recorded live run: charge, notify, transfer (Unsafe), charge. */
  const recorded = { runId: "rec-1", calls: [] as string[] };
  const args = [
    { tool: charge.id, args: { order_id: "A-1", amount_cents: 1200 } },
    { tool: notify.id, args: { request_id: "N-1", text: "shipped" } },
    { tool: transfer.id, args: { to: "acct-9", amount_cents: 50 } },
    { tool: charge.id, args: { order_id: "A-2", amount_cents: 300 } },
  ];
  const entries = (): Promise<number> => db.collection("entries").countDocuments({});
  const shadowEntries = (): Promise<number> => db.collection("shadow_entries").countDocuments({});
  const cli = (argv: string[]): ReturnType<typeof runCli> =>
    runCli(argv, { KEYCAP_ADMIN_TOKEN: ADMIN_TOKEN, KEYCAP_ADMIN_ADDRESS: proc.endpoints.admin!, KEYCAP_KERNEL_ADDRESS: proc.endpoints.kernel! });

  before(async function () {
    env = serviceEnv({ KEYCAP_ADMIN_TOKEN: ADMIN_TOKEN });
    proc = await startService("all", env);
    kernel = new KernelClient(proc.endpoints.kernel!, { ledgerAddress: proc.endpoints.ledger! });
    mongo = await MongoClient.connect(env["MONGODB_URI"]!);
    db = mongo.db(env["KEYCAP_MONGODB_DATABASE"]!);
    const live = new Runtime(kernel, tools);
    await live.registerAll();
    for (const a of args) {
      const { handle } = await live.run(a.tool, a.args, { runId: recorded.runId });
      recorded.calls.push(handle.callId);
    }
  });

  after(async function () {
    kernel?.close();
    await mongo?.close();
    await proc?.stop("SIGKILL").catch(() => undefined);
  });

  it("replays a recorded run with the same arguments: recorded outcomes, 0 new entries, the Unsafe call denied and listed by `keycap rejections`", async function () {
    const before = await entries();
    const replay = new Runtime(kernel, tools, { mode: "replay", replayOf: recorded.runId });
    for (const [i, a] of args.entries()) {
      if (a.tool === transfer.id) {
        const denied = await refusal(replay.run(a.tool, a.args, { runId: "rep-1" }));
        expect([denied.codeName, denied.reason]).to.deep.equal(["PERMISSION_DENIED", "SANDBOX_UNSAFE_DENIED"]);
        expect(denied.metadata["position"]).to.equal(String(i));
        continue;
      }
      const { handle, output, recorded: matched } = await replay.run(a.tool, a.args, { runId: "rep-1" });
      expect(matched?.callId, `position ${i}`).to.equal(recorded.calls[i]);
      expect(matched?.outcomeDetail).to.match(/^written e_/);
      // The tool's write was answered from the recorded effect: the same entry, as a duplicate.
      expect(output).to.equal(`duplicate ${matched!.outcomeDetail.slice("written ".length)}`);
      expect(handle.callId).to.not.equal(recorded.calls[i]);
    }
    expect(await entries(), "no new entry").to.equal(before);
    expect(await shadowEntries()).to.equal(0);
    const r = await cli(["rejections", "--tool", transfer.id, "--reason", "SANDBOX_UNSAFE_DENIED", "--json"]);
    expect(r.code, r.stderr).to.equal(0);
    const rows = JSON.parse(r.stdout) as { toolId: string; reason: string; service: string }[];
    expect(rows.map((x) => [x.toolId, x.reason, x.service])).to.deep.include([transfer.id, "SANDBOX_UNSAFE_DENIED", "kernel"]);
  });

  it("refuses REPLAY_DIVERGED at the first changed call, naming its position and the recorded call it was expected to match", async function () {
    const replay = new Runtime(kernel, tools, { mode: "replay", replayOf: recorded.runId });
    const first = args[0]!;
    const diverged = await refusal(replay.run(first.tool, { ...first.args, amount_cents: 9999 }, { runId: "rep-2" }));
    expect([diverged.codeName, diverged.reason]).to.deep.equal(["FAILED_PRECONDITION", "REPLAY_DIVERGED"]);
    expect(diverged.metadata).to.include({ position: "0", expected_call_id: recorded.calls[0], expected_tool_id: charge.id });
    // The divergence took no position: the unchanged call still matches position 0.
    const { recorded: matched } = await replay.run(first.tool, first.args, { runId: "rep-2" });
    expect(matched?.callId).to.equal(recorded.calls[0]);
    const wrongTool = await refusal(replay.run(charge.id, args[3]!.args, { runId: "rep-2" }));
    expect(wrongTool.metadata).to.include({ position: "1", expected_call_id: recorded.calls[1], expected_tool_id: notify.id });
    // Recorded against the tool that diverged.
    const r = await cli(["rejections", "--tool", charge.id, "--reason", "REPLAY_DIVERGED", "--json"]);
    expect(r.code, r.stderr).to.equal(0);
    expect((JSON.parse(r.stdout) as { toolId: string }[]).map((x) => x.toolId)).to.deep.equal([charge.id, charge.id]);
  });

  it("refuses a replay call past the recorded run's end, expecting no call", async function () {
    const before = await entries();
    const replay = new Runtime(kernel, tools, { mode: "replay", replayOf: recorded.runId });
    for (const a of args) {
      if (a.tool !== transfer.id) await replay.run(a.tool, a.args, { runId: "rep-3" });
      else await refusal(replay.run(a.tool, a.args, { runId: "rep-3" }));
    }
    const past = await refusal(replay.run(charge.id, { order_id: "A-3", amount_cents: 1 }, { runId: "rep-3" }));
    expect(past.reason).to.equal("REPLAY_DIVERGED");
    expect(past.metadata).to.include({ position: "4", expected_call_id: "none", expected_tool_id: "none" });
    expect(await entries()).to.equal(before);
  });

  it("runs a shadow run beside a live run: the live entries exactly as without it, the shadow's effects in shadow_entries, Unsafe denied", async function () {
    const live = new Runtime(kernel, tools);
    const shadow = new Runtime(kernel, tools, { mode: "shadow", shadows: "live-2" });
    const workload = [
      { tool: charge.id, args: { order_id: "S-1", amount_cents: 10 } },
      { tool: notify.id, args: { request_id: "N-S-1" } },
    ];
    const before = await entries();
    for (const w of workload) await live.run(w.tool, w.args, { runId: "live-2" });
    const liveOnly = await entries();
    expect(liveOnly - before).to.equal(workload.length);
    const shadowBefore = await shadowEntries();
    for (const w of workload) {
      const { handle } = await shadow.run(w.tool, w.args, { runId: "shadow-2" });
      // Written again under the same keys it would take effect twice live: it goes to the shadow store.
      const again = await handle.write("again");
      expect([again.shadow, again.duplicate]).to.deep.equal([true, true]);
    }
    expect(await entries(), "live entries unchanged by the shadow run").to.equal(liveOnly);
    expect((await shadowEntries()) - shadowBefore).to.equal(workload.length);
    const denied = await refusal(shadow.run(transfer.id, { to: "x" }, { runId: "shadow-2" }));
    expect(denied.reason).to.equal("SANDBOX_UNSAFE_DENIED");
    const shown = await kernel.listRunCalls("shadow-2");
    expect(shown.map((c) => [c.call?.mode, c.call?.shadowsRunId])).to.deep.equal(workload.map(() => [RunMode.RUN_MODE_SHADOW, "live-2"]));
  });

  it("a replay or shadow capability is refused by the TypeScript sink (SANDBOX_CAPABILITY_NOT_LIVE); at the ledger a replay capability writes nothing", async function () {
    const keys = new RemoteJwksSource(async () => (await kernel.signingKeys()).jwksJson);
    const sink = new Sink({ name: "modes", tools: [charge.id, notify.id], keys, spentStore: new InMemorySpentStore() });
    const first = args[0]!;
    const replayed = await kernel.beginCall(first.tool, JSON.stringify(first.args), { runId: "rep-4", mode: "replay", replayOf: recorded.runId });
    const shadowed = await kernel.beginCall(first.tool, JSON.stringify(first.args), { runId: "shadow-4", mode: "shadow" });
    for (const h of [replayed, shadowed]) {
      const err: unknown = await sink.admit(`Bearer ${h.capability}`, { method: "test", peer: "127.0.0.1:1" }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).to.be.instanceOf(KeycapError);
      expect([(err as KeycapError).code, (err as KeycapError).reason]).to.deep.equal([status.PERMISSION_DENIED, "SANDBOX_CAPABILITY_NOT_LIVE"]);
    }
    const before = await entries();
    const ledger = new LedgerClient(proc.endpoints.ledger!);
    try {
      // Another live key under the replay capability: outside its grant.
      const live = await kernel.begin(first.tool, { order_id: "L-9", amount_cents: 1 }, { runId: "live-9" });
      await live.write("live");
      const other = await refusal(ledger.writeWithCapability(replayed.capability, { key: live.key, payload: Buffer.from("x") }));
      expect(other.reason).to.equal("KEY_MISMATCH");
      const afterLive = await entries();
      expect(afterLive - before).to.equal(1);
      // Its own (recorded) key: the recorded entry, marked replayed; nothing written.
      const res = await ledger.writeWithCapability(replayed.capability, { key: replayed.call!.key, payload: Buffer.from("other payload") });
      expect([res.duplicate, res.replayed, res.payloadMismatch]).to.deep.equal([true, true, true]);
      // A recorded call that never wrote: nothing to answer from, and still nothing written.
      await kernel.beginCall(charge.id, JSON.stringify({ order_id: "U-1", amount_cents: 5 }), { runId: "rec-5" });
      const unwritten = await kernel.begin(charge.id, { order_id: "U-1", amount_cents: 5 }, { runId: "rep-5", mode: "replay", replayOf: "rec-5" });
      const none = await refusal(unwritten.write("x"));
      expect([none.codeName, none.reason]).to.deep.equal(["FAILED_PRECONDITION", "REPLAY_NO_RECORDED_EFFECT"]);
      expect(await entries()).to.equal(afterLive);
    } finally {
      ledger.close();
    }
  });

  it("the ledger refuses an Unsafe capability whose mode is not live (SANDBOX_UNSAFE_DENIED), even one signed with the kernel's key", async function () {
    // The kernel never mints one; a component upstream that did must still get no effect.
    const keys = await loadOrCreateSigningKeys(path.join(env["KEYCAP_DATA_DIR"]!, "signing-keys.json"), { retiredGraceSeconds: 905 });
    const minted = await new CapabilityMinter(keys).mint({
      principal: "local-runtime",
      toolId: transfer.id,
      effect: "unsafe",
      callId: "forged-1",
      attempt: 1,
      mode: "shadow",
    });
    const before = [await entries(), await shadowEntries()];
    const ledger = new LedgerClient(proc.endpoints.ledger!);
    try {
      const denied = await refusal(ledger.writeWithCapability(minted.token, { payload: Buffer.from("x") }));
      expect([denied.codeName, denied.reason]).to.deep.equal(["PERMISSION_DENIED", "SANDBOX_UNSAFE_DENIED"]);
    } finally {
      ledger.close();
    }
    expect([await entries(), await shadowEntries()]).to.deep.equal(before);
  });

  it("checks the mode per call in a BeginCalls batch: one bad item is refused INVALID_RUN_MODE, the others begin", async function () {
    const item = (replayOfRunId: string): BeginCallRequest => ({
      toolId: charge.id,
      callId: `batch-${replayOfRunId || "none"}`,
      runId: "rep-6",
      argumentsJson: JSON.stringify(args[0]!.args),
      mode: RunMode.RUN_MODE_REPLAY,
      replayOfRunId,
      shadowsRunId: "",
    });
    const res = await callUnary(kernel.raw.beginCalls, kernel.raw, { calls: [item(""), item(recorded.runId)], receipts: [] }, TEST_RUNTIME_TOKEN);
    const [bad, good] = res.results.map((r) => r.result);
    expect(bad?.$case).to.equal("errorStatus");
    const err = errorOf(bad?.value as Buffer);
    expect([err.codeName, err.reason, err.metadata["field"]]).to.deep.equal(["INVALID_ARGUMENT", "INVALID_RUN_MODE", "replay_of_run_id"]);
    expect(good?.$case).to.equal("begun");
    expect((good?.value as BeginCallResponse).recordedCall?.callId).to.equal(recorded.calls[0]);
  });

  it("a replay call begun twice at once (a retry racing the first) holds one position and is one call", async function () {
    const first = args[0]!;
    const begin = (): Promise<BeginCallResponse> =>
      kernel.beginCall(first.tool, JSON.stringify(first.args), { runId: "rep-7", callId: "rep-7-call-0", mode: "replay", replayOf: recorded.runId });
    const both = await Promise.all([begin(), begin(), begin()]);
    expect(both.map((b) => [b.call?.callId, b.call?.replayPosition, b.recordedCall?.callId])).to.deep.equal(
      both.map(() => ["rep-7-call-0", 0, recorded.calls[0]]),
    );
    // The next call of the run is at position 1.
    const next = await kernel.beginCall(notify.id, JSON.stringify(args[1]!.args), { runId: "rep-7", mode: "replay", replayOf: recorded.runId });
    expect([next.call?.replayPosition, next.recordedCall?.callId]).to.deep.equal([1, recorded.calls[1]]);
  });

  it("a replay run whose position hint fell behind (the kernel killed between taking a position and moving the hint) still matches the next call at the next free position", async function () {
    // Found by the torture's replay lane: the stale hint's position was compared before it was known to be free.
    const begin = (i: number): Promise<BeginCallResponse> =>
      kernel.beginCall(args[i]!.tool, JSON.stringify(args[i]!.args), {
        runId: "rep-stale",
        callId: `rep-stale-${i}`,
        mode: "replay",
        replayOf: recorded.runId,
      });
    expect((await begin(0)).call?.replayPosition).to.equal(0);
    await db.collection("replay_runs").updateOne({ _id: "rep-stale" as never }, { $set: { next: 0 } });
    const second = await begin(1);
    expect([second.call?.replayPosition, second.recordedCall?.callId]).to.deep.equal([1, recorded.calls[1]]);
  });

  it("a call id names one call in one mode: beginning a live call id again in shadow is refused CALL_ID_CONFLICT", async function () {
    const a = JSON.stringify({ order_id: "M-1", amount_cents: 7 });
    await kernel.beginCall(charge.id, a, { runId: "run-m", callId: "mode-call-1" });
    const again = await refusal(kernel.beginCall(charge.id, a, { runId: "run-m", callId: "mode-call-1", mode: "shadow" }));
    expect(again.reason).to.equal("CALL_ID_CONFLICT");
  });

  it("`keycap runs show` prints a run's calls in order: position, tool, key, outcome, mode", async function () {
    const json = await cli(["runs", "show", recorded.runId, "--json"]);
    expect(json.code, json.stderr).to.equal(0);
    const rows = JSON.parse(json.stdout) as { position: number; toolId: string; callId: string; outcome: string; mode: string; key: string }[];
    expect(rows.map((r) => [r.position, r.toolId, r.callId, r.outcome, r.mode])).to.deep.equal(
      args.map((a, i) => [i, a.tool, recorded.calls[i], "succeeded", "live"]),
    );
    expect(rows[0]!.key).to.have.length(43);
    const replay = await cli(["runs", "show", "rep-1"]);
    expect(replay.code, replay.stderr).to.equal(0);
    expect(replay.stdout).to.include("replay").and.include(recorded.runId).and.include(charge.id).and.include(notify.id).and.not.include(transfer.id);
    const shadow = JSON.parse((await cli(["runs", "show", "shadow-2", "--json"])).stdout) as { mode: string; ofRun: string }[];
    expect(shadow.map((r) => [r.mode, r.ofRun])).to.deep.equal([
      ["shadow", "live-2"],
      ["shadow", "live-2"],
    ]);
    const empty = await cli(["runs", "show", "no-such-run"]);
    expect(empty.stdout).to.include("no calls in run no-such-run");
  });

  it("`keycap runs diff` lines a replay up with the recorded run (matches, the Unsafe call denied) and a shadow run with the live run it shadows", async function () {
    const json = await cli(["runs", "diff", recorded.runId, "rep-1", "--json"]);
    expect(json.code, json.stderr).to.equal(0);
    const rows = JSON.parse(json.stdout) as { mark: string; a?: { callId: string; toolId: string }; b?: { mode: string } }[];
    expect(rows.map((r) => [r.mark, r.a?.callId, r.b?.mode])).to.deep.equal([
      ["match", recorded.calls[0], "replay"],
      ["match", recorded.calls[1], "replay"],
      ["denied-unsafe", recorded.calls[2], undefined],
      ["match", recorded.calls[3], "replay"],
    ]);
    const table = await cli(["runs", "diff", "live-2", "shadow-2"]);
    expect(table.code, table.stderr).to.equal(0);
    expect(table.stdout).to.include(charge.id).and.include(notify.id).and.include("2 match");
  });
});
