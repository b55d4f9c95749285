/**
 * Issue 32 item 3: the retention policy (docs/retention.md, ADR 0031) on a real
 * MongoDB-protocol server. With short retention settings, what has expired goes — completed
 * calls and their completions, refusal records, spent single-use capabilities once expired,
 * stored gateway and MCP results, idle replay runs' positions, and entries only when an
 * operator sets a retention for them — while everything recovery or duplicate detection still
 * needs stays: pending and indeterminate calls, unexpired spent capabilities, entries of
 * unfinished calls. Two sweepers on one database never sweep at the same time.
 */
import { expect } from "chai";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { MongoClient, type Db } from "mongodb";
import { defineTool, KernelClient } from "../clients/ts/src";
import { loadConfig, type KeycapConfig } from "../services/common/src/config";
import { createLogger } from "../services/common/src/logger";
import { listingBucketOf } from "../services/common/src/bucketed-listing";
import { RejectionAudit, type RejectionInput } from "../services/common/src/rejection-audit";
import { cutoff, RetentionSweeper, type RetentionTask } from "../services/common/src/retention-sweeper";
import { readTotals } from "../services/common/src/stats-counters";
import { ForwardStore } from "../services/gateway/src/forward-store";
import { CallJournal, type CallRecord } from "../services/kernel/src/call-journal";
import { kernelRetentionTasks } from "../services/kernel/src/kernel-retention";
import { ReplayPositions } from "../services/kernel/src/replay-positions";
import { EntryStore, type EntryDoc } from "../services/ledger/src/entry-store";
import { ledgerRetentionTasks } from "../services/ledger/src/ledger-retention";
import { ShadowStore } from "../services/ledger/src/shadow-store";
import { ResultStore } from "../services/mcp/src/result-store";
import { MongoSpentStore } from "../services/sink/src";
import { freshDatabaseName, testMongoUri } from "./support/mongo";
import { serviceEnv, startService, type ServiceProcess } from "./support/processes";
import { scrape, sumOf } from "./support/prometheus";

const logger = createLogger("test", "silent");
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Settings as a service would load them: retention of one second for every kind that has one. */
function shortRetention(extra: Record<string, string> = {}): KeycapConfig {
  return loadConfig({
    KEYCAP_DATA_DIR: fs.mkdtempSync(path.join(os.tmpdir(), "keycap-retention-")),
    KEYCAP_RETENTION_CALLS_SECONDS: "1",
    KEYCAP_RETENTION_REFUSALS_SECONDS: "1",
    KEYCAP_RETENTION_GATEWAY_RESULTS_SECONDS: "1",
    ...extra,
  });
}

/**
 * A sweeper for sweepOnce. Without an interval its lease clock stands at the start of the
 * current term: no sweep starts in a term's last quarter, and a test must not depend on when
 * in the term it runs. The records' retention runs on the real clock.
 */
function sweeperOf(db: Db, tasks: RetentionTask[], opts: { batch?: number; holder?: string; intervalMs?: number } = {}): Promise<RetentionSweeper> {
  const intervalMs = opts.intervalMs ?? 60_000;
  const termStart = Math.floor(Date.now() / (2 * intervalMs)) * 2 * intervalMs;
  return RetentionSweeper.open(db, tasks, {
    intervalMs,
    batch: opts.batch ?? 100,
    service: "test",
    logger,
    ...(opts.holder ? { holder: opts.holder } : {}),
    ...(opts.intervalMs === undefined ? { now: () => termStart + 1 } : {}),
  });
}

function call(id: string, effect: CallRecord["effect"] = "idempotent"): CallRecord {
  const now = new Date();
  return {
    _id: id,
    tool_id: "ret.tool",
    run_id: "run-1",
    arguments_json: JSON.stringify({ order: id }),
    effect,
    ...(effect === "idempotent" ? { key: `key-${id}` } : {}),
    attempt: 1,
    state: "pending",
    capability: { iss: "i", aud: "a", sub: "rt", tool_id: "ret.tool", effect, call_id: id, attempt: 1, jti: `jti-${id}`, iat: 1, exp: 2, key: `key-${id}` },
    created_at: now,
    updated_at: now,
  };
}

function entry(id: string, callId: string): EntryDoc {
  return {
    _id: `idem:${id}`,
    entry_id: `e-${id}`,
    tool_id: "ret.tool",
    effect: "idempotent",
    call_id: callId,
    attempt: 1,
    capability_id: `jti-${id}`,
    key: id,
    request_id: "",
    payload: Buffer.from("paid"),
    payload_sha256: "00",
    recorded_at: new Date(),
    payload_mismatch: false,
  };
}

const refusal = (reason: string): RejectionInput => ({
  method: "Write",
  reason,
  code: "PERMISSION_DENIED",
  toolId: "ret.tool",
  toolIdVerified: true,
  peer: "127.0.0.1:1",
  message: "no",
});

async function ids(db: Db, collection: string): Promise<string[]> {
  return (await db.collection<{ _id: string }>(collection).find({}).toArray()).map((d) => d._id).sort();
}

describe("retention (issue 32 item 3)", function () {
  this.timeout(120_000);
  let client: MongoClient;
  let db: Db;

  beforeEach(async function () {
    client = await MongoClient.connect(testMongoUri(), { serverSelectionTimeoutMS: 10_000 });
    db = client.db(freshDatabaseName("ret"));
  });

  afterEach(async function () {
    await client?.close();
  });

  it("removes completed calls and their completions after KEYCAP_RETENTION_CALLS_SECONDS; pending and indeterminate calls, and calls completed since, stay", async function () {
    const journal = await CallJournal.open(db, logger, { sweep: { maxDelayMs: 1 } });
    const audit = await RejectionAudit.open(db, { service: "kernel", unauthenticatedPerMinute: 60, logger });
    const tasks = kernelRetentionTasks(shortRetention().retention, { journal, positions: await ReplayPositions.open(db), audit });
    for (const id of ["done-old", "pending-old"]) await journal.begin(call(id));
    await journal.begin(call("unsafe-old", "unsafe"));
    await journal.complete("done-old", "succeeded", "");
    await journal.markIndeterminate("unsafe-old", "UNSAFE_NOT_RETRIED", "needs a person", "rt");
    await sleep(2_100); // past the whole second of the completion (retention goes by second, ADR 0033)
    await journal.begin(call("done-new"));
    await journal.complete("done-new", "succeeded", "");
    await journal.close();

    const removed = await (await sweeperOf(db, tasks)).sweepOnce();

    expect(removed["completed_calls"]).to.equal(1);
    expect(await journal.get("done-old")).to.equal(undefined);
    expect(await ids(db, "calls")).to.deep.equal(["done-new", "pending-old", "unsafe-old"]);
    expect(await ids(db, "call_completions")).to.deep.equal(["done-new"]);
    expect((await journal.listPending("", undefined, 10)).calls.map((c) => c._id)).to.deep.equal(["pending-old"]);
    expect((await journal.listIndeterminate("", undefined, 10)).calls.map((c) => c._id)).to.deep.equal(["unsafe-old"]);
    expect((await journal.get("done-new"))?.state).to.equal("completed");
    await audit.close();
  });

  it("a completed call whose pending copy a crash left behind loses the copy first and is never listed or healed back as pending", async function () {
    const journal = await CallJournal.open(db, logger, { sweep: { maxDelayMs: 1 } });
    await journal.begin(call("crashed"));
    await journal.complete("crashed", "succeeded", "");
    await journal.close();
    // The copy a crash between the completion and its removal leaves behind.
    await db.collection<CallRecord>("pending_calls").insertOne(call("crashed"));
    await sleep(2_100); // past the whole second of the completion (retention goes by second, ADR 0033)

    expect(await journal.expireCompleted(cutoff(1) as Date, 10, 300)).to.equal(0);
    expect(await ids(db, "pending_calls")).to.deep.equal([]);
    expect((await journal.get("crashed"))?.state, "kept until a later sweep").to.equal("completed");
    expect((await journal.listPending("", undefined, 10)).calls).to.deep.equal([]);
    expect(await journal.expireCompleted(cutoff(1) as Date, 10, 300), "still settling").to.equal(0);
    await sleep(400);
    expect(await journal.expireCompleted(cutoff(1) as Date, 10, 300)).to.equal(1);
    expect(await journal.get("crashed")).to.equal(undefined);
    expect((await journal.listPending("", undefined, 10)).calls).to.deep.equal([]);
  });

  it("removes refusal records after KEYCAP_RETENTION_REFUSALS_SECONDS, at most 10 batches per sweep, and leaves the refusal counters as they were", async function () {
    // One refusal a second, the last 25 seconds ago (the sweep removes whole seconds, ADR 0033).
    let clock = Date.now() - 26_000;
    const audit = await RejectionAudit.open(db, { service: "ledger", unauthenticatedPerMinute: 60, logger, now: () => clock });
    for (let i = 0; i < 25; i++, clock += 1000) await audit.record(refusal("KEY_MISMATCH"));
    // The one kept: a minute ahead, so a slow machine between here and the sweeps cannot age it past the 1 s period.
    clock = Date.now() + 60_000;
    await audit.record(refusal("EXPIRED"));
    const sweeper = await sweeperOf(db, [audit.retentionTask(1)], { batch: 2 });

    expect((await sweeper.sweepOnce())["rejections"], "10 batches of 2").to.equal(20);
    expect((await sweeper.sweepOnce())["rejections"]).to.equal(5);
    const left = await audit.list({ toolId: "", reason: "", since: undefined, until: undefined }, undefined, 100, 5_000);
    expect(left.map((r) => r.reason)).to.deep.equal(["EXPIRED"]);
    // The swept seconds' marks went with them, in every listing (and emptied minutes, hours, days).
    const marks = await db.collection<{ _id: string; level: string; at: Date }>("listing_marks").find({ coll: "rejections" }).toArray();
    const kept = listingBucketOf(left[0]!.rejected_at);
    expect(marks.filter((m) => m.level === "s").map((m) => m._id.split("/")[3])).to.satisfy((b: string[]) => b.length > 0 && b.every((x) => x === kept));
    expect(marks.every((m) => kept.startsWith(m._id.split("/")[3]!))).to.equal(true);
    await audit.close();
    // Counters count what was refused, not what is still stored (ADR 0025).
    expect((await readTotals(db, 5_000)).counts.rejections).to.equal(26);
  });

  it("forgets a spent single-use capability only after its expiry plus the clock tolerance: an unexpired one is still refused as reused", async function () {
    const store = await EntryStore.open(db, logger);
    const audit = await RejectionAudit.open(db, { service: "ledger", unauthenticatedPerMinute: 60, logger });
    const config = shortRetention({ KEYCAP_CLOCK_TOLERANCE_SECONDS: "5" });
    const now = Date.now();
    await store.spendCapability("jti-expired", "ret.tool", new Date(now - 10_000));
    await store.spendCapability("jti-within-skew", "ret.tool", new Date(now - 2_000));
    await store.spendCapability("jti-live", "ret.tool", new Date(now + 300_000));

    const removed = await (await sweeperOf(db, ledgerRetentionTasks(db, config, store, audit))).sweepOnce();

    expect(removed["spent_capabilities"]).to.equal(1);
    expect(await ids(db, "capability_uses")).to.deep.equal(["jti-live", "jti-within-skew"]);
    expect(await store.spendCapability("jti-live", "ret.tool", new Date(now + 300_000)), "reuse refused").to.equal(false);
    await audit.close();
    await store.close();
  });

  it("a sink's spent capabilities go the same way (MongoSpentStore)", async function () {
    const spent = await MongoSpentStore.open(db, { sweepIntervalMs: 0, clockSkewSeconds: 5 });
    const now = Date.now();
    const cap = (jti: string, expiresAt: number) => ({ sink: "pay", jti, toolId: "ret.tool", callId: jti, effect: "unsafe", expiresAt: new Date(expiresAt) });
    expect(await spent.spend(cap("old", now - 10_000))).to.equal(true);
    expect(await spent.spend(cap("live", now + 300_000))).to.equal(true);
    expect(await spent.sweep(100)).to.equal(1);
    expect(await spent.spend(cap("live", now + 300_000)), "reuse refused").to.equal(false);
    await spent.close();
  });

  it("keeps entries unless KEYCAP_RETENTION_ENTRIES_SECONDS is set; then removes old ones except those an unfinished call needs, and the entry counters stay", async function () {
    const store = await EntryStore.open(db, logger);
    const audit = await RejectionAudit.open(db, { service: "ledger", unauthenticatedPerMinute: 60, logger });
    const journal = await CallJournal.open(db, logger);
    await journal.begin(call("c-pending"));
    for (const [key, callId] of [
      ["k-done", "c-done"],
      ["k-pending", "c-pending"],
      ["k-same-key", "c-other"],
    ] as const)
      await store.insert(entry(key, callId));
    // A pending call under the key of an entry another call wrote: its recovery expects a duplicate.
    await journal.begin({ ...call("c-retry"), key: "k-same-key" });
    await sleep(1_200);

    const kept = ledgerRetentionTasks(db, shortRetention(), store, audit).map((t) => t.name);
    expect(kept, "entries are kept by default").to.not.include("entries");
    const removed = await (await sweeperOf(db, ledgerRetentionTasks(db, shortRetention({ KEYCAP_RETENTION_ENTRIES_SECONDS: "1" }), store, audit))).sweepOnce();

    expect(removed["entries"]).to.equal(1);
    expect(await ids(db, "entries")).to.deep.equal(["idem:k-pending", "idem:k-same-key"]);
    // The same key again is a new effect: the insert wins.
    expect(await store.insert(entry("k-done", "c-done-again"))).to.equal(true);
    await store.close();
    await audit.close();
    await journal.close();
    expect((await readTotals(db, 5_000)).counts.entries).to.equal(4);
  });

  it("removes a shadow run's would-be effects after KEYCAP_RETENTION_SHADOW_ENTRIES_SECONDS; a newer one stays; none when kept forever", async function () {
    const store = await EntryStore.open(db, logger);
    const audit = await RejectionAudit.open(db, { service: "ledger", unauthenticatedPerMinute: 60, logger });
    const shadow = await ShadowStore.open(db);
    await shadow.insert({ ...entry("k-shadow-old", "c-shadow-old"), recorded_at: new Date(Date.now() - 10_000) });
    await shadow.insert(entry("k-shadow-new", "c-shadow-new"));
    const forever = ledgerRetentionTasks(db, shortRetention({ KEYCAP_RETENTION_SHADOW_ENTRIES_SECONDS: "0" }), store, audit, shadow).map((t) => t.name);
    expect(forever).to.not.include("shadow_entries");
    const removed = await (
      await sweeperOf(db, ledgerRetentionTasks(db, shortRetention({ KEYCAP_RETENTION_SHADOW_ENTRIES_SECONDS: "5" }), store, audit, shadow))
    ).sweepOnce();
    expect(removed["shadow_entries"]).to.equal(1);
    expect(await ids(db, "shadow_entries")).to.deep.equal(["idem:k-shadow-new"]);
    await store.close();
    await audit.close();
  });

  it("removes stored gateway and MCP results once recorded longer ago than their retention; keys in flight, retryable or indeterminate stay", async function () {
    const forwards = await ForwardStore.open(db);
    const results = await ResultStore.open(db);
    const lease = new Date(Date.now() + 60_000);
    const claim = (key: string) => ({ key, toolId: "ret.tool", callId: key, principal: "rt", requestSha256: "00", method: "POST", url: "http://x/" });
    for (const key of ["g-done", "g-sending"]) await forwards.claimNew(claim(key), lease);
    await forwards.complete("g-done", 1, { response: { status: 200, headers: [], body: Buffer.from("ok"), bodyTruncated: false } });
    const holder = { host: "h", pid: 1, instance: "i" };
    for (const slot of ["m-done", "m-sending", "m-lost"]) await results.claimNew(slot, "ret.tool", slot, lease, holder, "00");
    await results.complete("m-done", 1, "{}", false);
    const lost = await results.get("m-lost");
    await results.markIndeterminate(lost!, "lost in a crash");
    await sleep(1_200);

    expect(await forwards.expire(cutoff(1) as Date, 100)).to.equal(1);
    expect(await results.expire(cutoff(1) as Date, 100)).to.equal(1);
    expect(await ids(db, "gateway_requests")).to.deep.equal(["g-sending"]);
    expect(await ids(db, "mcp_results")).to.deep.equal(["m-lost", "m-sending"]);
  });

  it("forgets an idle replay run's positions, but keeps a run with a call still pending", async function () {
    const journal = await CallJournal.open(db, logger);
    const positions = await ReplayPositions.open(db);
    const audit = await RejectionAudit.open(db, { service: "kernel", unauthenticatedPerMinute: 60, logger });
    await positions.take("replay-done", 0, "rc-1", "rec-1");
    await positions.take("replay-done", 1, "rc-2", "rec-2");
    await journal.begin(call("rc-pending"));
    await positions.take("replay-busy", 0, "rc-pending", "rec-1");
    await sleep(1_200);

    const removed = await (await sweeperOf(db, kernelRetentionTasks(shortRetention().retention, { journal, positions, audit }))).sweepOnce();

    expect(removed["replay_positions"]).to.equal(2);
    expect(await positions.heldBy("replay-done", "rc-1")).to.equal(undefined);
    expect(await positions.next("replay-done")).to.equal(0);
    expect((await positions.heldBy("replay-busy", "rc-pending"))?.position).to.equal(0);
    await audit.close();
    await journal.close();
  });

  it("two sweepers on one database: only one sweeps a task at a time, term after term", async function () {
    let active = 0;
    let most = 0;
    const sweeps: string[] = [];
    const probe = (who: string): RetentionTask => ({
      name: "probe",
      sweep: async () => {
        active++;
        most = Math.max(most, active);
        sweeps.push(who);
        await sleep(30);
        active--;
        return 0;
      },
    });
    const a = (await sweeperOf(db, [probe("a")], { holder: "a", intervalMs: 100 })).start();
    const b = (await sweeperOf(db, [probe("b")], { holder: "b", intervalMs: 100 })).start();
    // Both also sweep on demand, as often as they can: the lease still lets one through per term.
    const end = Date.now() + 2_500;
    while (Date.now() < end) await Promise.all([a.sweepOnce(), b.sweepOnce(), sleep(10)]);
    await Promise.all([a.stop(), b.stop()]);

    expect(most, "sweeps at the same time").to.equal(1);
    expect(sweeps.length).to.be.at.least(5);
    const terms = await db.collection<{ task: string; term: number; holder: string }>("retention_leases").find({ task: "probe" }).toArray();
    expect(new Set(terms.map((t) => t.term)).size, "one holder per term").to.equal(terms.length);
  });

  describe("in the services", function () {
    let svc: ServiceProcess | undefined;
    let more: ServiceProcess[] = [];

    afterEach(async function () {
      await Promise.all([svc, ...more].map((p) => p?.stop()));
      svc = undefined;
      more = [];
    });

    it("two kernels on one database: each term of each task is swept by one of them only", async function () {
      const env = serviceEnv({ KEYCAP_RETENTION_SWEEP_INTERVAL_MS: "100", KEYCAP_LOG_LEVEL: "debug" });
      more = [await startService("kernel", env), await startService("kernel", env)];
      await sleep(3_000);
      const swept = more.map((k) => {
        const terms = new Set<string>();
        for (const m of k.output().matchAll(/"task":"([a-z_]+)","removed":\d+,"term":(\d+),"msg":"retention: swept"/g)) terms.add(`${m[1]}@${m[2]}`);
        return terms;
      });
      const both = [...swept[0]!].filter((t) => swept[1]!.has(t));
      expect(both, "terms swept by both kernels").to.deep.equal([]);
      // Six 200 ms terms of three tasks at least, shared between them.
      expect(swept[0]!.size + swept[1]!.size).to.be.at.least(18);
    });

    it("a running kernel removes a completed call after its retention, keeps the pending one and the entries, and reports what it swept as a metric and a debug line", async function () {
      const env = serviceEnv({
        KEYCAP_RETENTION_CALLS_SECONDS: "1",
        KEYCAP_RETENTION_SWEEP_INTERVAL_MS: "200",
        KEYCAP_METRICS_LISTEN: "127.0.0.1:0",
        KEYCAP_LOG_LEVEL: "debug",
      });
      svc = await startService("all", env);
      const charge = defineTool({ id: "ret.charge", effect: { kind: "idempotent", key: { fields: ["/order"] } } });
      const kernel = new KernelClient(svc.endpoints.kernel!, { ledgerAddress: svc.endpoints.ledger! });
      try {
        await kernel.registerTool(charge);
        const done = await kernel.begin(charge.id, { order: "done" });
        await done.write("paid done");
        await done.complete();
        // Begun, not written: pending (a write would complete it, ADR 0034).
        const pending = await kernel.begin(charge.id, { order: "pending" });
        const calls = client.db(env["KEYCAP_MONGODB_DATABASE"]!).collection<{ _id: string }>("calls");
        const end = Date.now() + 15_000;
        while ((await calls.countDocuments({ _id: done.callId })) > 0 && Date.now() < end) await sleep(100);

        expect(await calls.countDocuments({ _id: done.callId }), "the completed call").to.equal(0);
        expect((await kernel.listPendingCalls()).map((c) => c.callId)).to.deep.equal([pending.callId]);
        expect(await client.db(env["KEYCAP_MONGODB_DATABASE"]!).collection("entries").countDocuments({})).to.equal(1);
        expect(sumOf(await scrape(svc.endpoints.metrics!), "keycap_retention_swept_total", { service: "kernel", task: "completed_calls" })).to.equal(1);
        expect(svc.output()).to.match(/"task":"completed_calls","removed":1,"term":\d+,"msg":"retention: swept"/);
      } finally {
        kernel.close();
      }
    });
  });
});
