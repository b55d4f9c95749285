/**
 * The kernel's operator reads at volume (issue 32; ADR 0033): FerretDB v1.24 pushes down only
 * top-level equality, so a read with `$in`, a range or a sort read the whole `calls` or
 * `call_completions` collection. A search by principal (who may have begun a million calls)
 * now walks the principal's listing marks and reads one second of calls at a time by `lb`;
 * the page's completions are read by `_id` one each; the indeterminate listing and the gauge
 * read `{state: "indeterminate"}`; key and run by their `eq_` indexes. Here: 20,000 calls of
 * one principal over ~2,000 seconds (and a burst second larger than a page) come back newest
 * first and paged with no duplicate and no gap; what the kernel journals carries `lb` and its
 * marks; and every read those answers make is such an equality (on FerretDB/PostgreSQL, one
 * PostgreSQL plans on an index, not a sequential scan). On FerretDB/SQLite every equality read
 * other than by `_id` still reads the whole table (ADR 0007), so a page costs a table read per
 * second it spans: there the same test runs on 400 calls (what it checks is the walk, not the volume).
 */
import { expect } from "chai";
import { MongoClient, type CommandStartedEvent, type Db, type Document } from "mongodb";
import { KernelClient } from "../clients/ts/src";
import { CallState } from "../gen/ts/keycap/kernel/v1/kernel";
import { listingBucketOf } from "../services/common/src/bucketed-listing";
import { marksFor, type MarkDoc } from "../services/common/src/domain/time-buckets";
import { createLogger } from "../services/common/src/logger";
import { encodePageToken } from "../services/common/src/paging";
import { CallJournal, type CallRecord } from "../services/kernel/src/call-journal";
import { journaledCall } from "./support/journaled-call";
import { testMongoBackend } from "./support/mongo";
import { runCli, serviceEnv, startService, type ServiceProcess } from "./support/processes";

const ADMIN = "call-search-volume-admin-token-0123456789";
const PRINCIPAL = "volume-runtime";
const OTHER = "other-runtime";
/** Calls of PRINCIPAL: 20,000 (400 on SQLite), BURST of them in one second at one instant, the rest 10 a second before it. */
const BURST = 150;
const INDETERMINATE = 5;

interface Preloaded {
  _id: string;
  created_at: Date;
  completed: boolean;
}

/** The fields of each collection an equality read may be bounded by: `_id`, or a field with an `eq_` index. */
const EQUALITY_INDEXED: Record<string, readonly string[]> = {
  calls: ["_id", "lb", "state", "key", "run_id"],
  call_completions: ["_id"],
  listing_marks: ["_id", "up"],
  // The settler reads the ledger's entries a second at a time (ADR 0034).
  entries: ["_id", "lb"],
};
/** Collections small by nature, read whole: unfinished calls' copies, a few unsettled seconds per replica. */
const SMALL = ["pending_calls", "unsettled_seconds"];

/** The plan's node types and index conditions, from FerretDB's explain (PostgreSQL's EXPLAIN as JSON). */
function planOf(explain: Document): string {
  return JSON.stringify((explain["queryPlanner"] as Document | undefined)?.["Plan"] ?? explain);
}

describe("the kernel's operator reads at volume: SearchCalls by principal walks time buckets (issue 32, ADR 0033)", function () {
  this.timeout(300_000);
  let svc: ServiceProcess;
  let mongo: MongoClient;
  let db: Db;
  let operator: KernelClient;
  /** PRINCIPAL's calls as SearchCalls must list them: newest first by (created_at, _id). */
  let expected: Preloaded[] = [];
  /** How many calls run-7 has. */
  let runSeven = 0;
  const env = (): Record<string, string> => ({ KEYCAP_ADMIN_TOKEN: ADMIN, KEYCAP_KERNEL_ADDRESS: svc.endpoints.kernel! });

  before(async function () {
    const senv = serviceEnv({ KEYCAP_ADMIN_TOKEN: ADMIN });
    mongo = await MongoClient.connect(senv["MONGODB_URI"]!);
    db = mongo.db(senv["KEYCAP_MONGODB_DATABASE"]!);
    // Seconds from 1,000 s before an hour boundary on: the walk crosses minutes and an hour.
    const t0 = Math.floor((Date.now() - 2 * 3_600_000) / 3_600_000) * 3_600_000 - 1_000_000;
    const regular = (testMongoBackend() === "ferretdb-sqlite" ? 400 : 20_000) - BURST;
    const calls: CallRecord[] = [];
    const call = (id: string, principal: string, at: number, extra: Partial<CallRecord> = {}): CallRecord =>
      journaled(id, new Date(at), principal, {
        run_id: `run-${calls.length % 100}`,
        arguments_json: `{"n":${calls.length}}`,
        principal,
        // Written as the journal writes it: the call's second, through the same helper.
        lb: listingBucketOf(new Date(at)),
        ...extra,
      });
    for (let i = 0; i < regular; i++) calls.push(call(`vc-${String(i).padStart(5, "0")}`, PRINCIPAL, t0 + Math.floor(i / 10) * 1000 + (i % 10) * 37));
    // One second holding more calls than a page, at one instant: the page boundary falls inside it (ties by _id).
    for (let i = regular; i < regular + BURST; i++) calls.push(call(`vc-${String(i).padStart(5, "0")}`, PRINCIPAL, t0 + (regular / 10 + 10) * 1000 + 500));
    // Another principal's calls in the same seconds, and a few indeterminate ones.
    for (let i = 0; i < regular / 4; i++) calls.push(call(`oc-${i}`, OTHER, t0 + Math.floor(i / 2.5) * 1000 + 11));
    for (let i = 0; i < INDETERMINATE; i++) calls.push(call(`ic-${i}`, OTHER, t0 + i * 1000 + 13, { state: "indeterminate", effect: "unsafe" }));
    const marks = new Map<string, MarkDoc>();
    for (const c of calls) for (const m of marksFor("calls", c.created_at, [{ scope: "principal", value: c.principal! }])) marks.set(m._id, m);
    await db.collection<MarkDoc>("listing_marks").insertMany([...marks.values()]);
    for (let i = 0; i < calls.length; i += 2000) await db.collection<CallRecord>("calls").insertMany(calls.slice(i, i + 2000));
    // Every third call of PRINCIPAL completed, and one indeterminate call settled by an operator.
    const done = calls.filter((c, i) => (c.principal === PRINCIPAL && i % 3 === 0) || c._id === "ic-0");
    for (let i = 0; i < done.length; i += 2000) {
      await db
        .collection<{ _id: string }>("call_completions")
        .insertMany(
          done.slice(i, i + 2000).map((c) => ({ _id: c._id, outcome: "succeeded", outcome_detail: "", completed_at: new Date(c.created_at.getTime() + 5) })),
        );
    }
    const completed = new Set(done.map((c) => c._id));
    runSeven = calls.filter((c) => c.run_id === "run-7").length;
    expected = calls
      .filter((c) => c.principal === PRINCIPAL)
      .map((c) => ({ _id: c._id, created_at: c.created_at, completed: completed.has(c._id) }))
      .sort((a, b) => b.created_at.getTime() - a.created_at.getTime() || (a._id < b._id ? 1 : -1));
    svc = await startService("all", senv);
    operator = new KernelClient(svc.endpoints.kernel!, { token: ADMIN });
  });

  after(async function () {
    operator?.close();
    await svc?.stop();
    await mongo?.close();
  });

  it("SearchCalls by principal: the newest page first, then page after page across seconds, no duplicate and no gap, each with its completion", async function () {
    const size = expected.length >= 10_000 ? 1000 : 100;
    const seen: string[] = [];
    let token = "";
    let pages = 0;
    do {
      const page = await operator.searchCallsPage({ principal: PRINCIPAL }, token, size);
      const want = expected.slice(seen.length, seen.length + size);
      expect(
        page.calls.map((c) => c.callId),
        `page ${pages}`,
      ).to.deep.equal(want.map((c) => c._id));
      expect(page.calls.map((c) => c.state === CallState.CALL_STATE_COMPLETED)).to.deep.equal(want.map((c) => c.completed));
      seen.push(...page.calls.map((c) => c.callId));
      token = page.nextPageToken;
      pages++;
    } while (token !== "");
    expect(pages).to.equal(Math.ceil(expected.length / size));
    expect(seen).to.have.length(expected.length);
    expect(new Set(seen).size).to.equal(seen.length);
    // Small pages: the first boundary falls inside the burst second (150 calls at one instant).
    const first = await operator.searchCallsPage({ principal: PRINCIPAL }, "", 100);
    expect(first.calls.map((c) => c.callId)).to.deep.equal(expected.slice(0, 100).map((c) => c._id));
    const second = await operator.searchCallsPage({ principal: PRINCIPAL }, first.nextPageToken, 100);
    expect(second.calls.map((c) => c.callId)).to.deep.equal(expected.slice(100, 200).map((c) => c._id));
    // The oldest page, from the token a client would hold there: the last call, and no further page.
    const near = expected[expected.length - 51]!;
    const last = await operator.searchCallsPage({ principal: PRINCIPAL }, encodePageToken({ t: near.created_at.getTime(), i: near._id }), 100);
    expect(last.calls.map((c) => c.callId)).to.deep.equal(expected.slice(-50).map((c) => c._id));
    expect(last.nextPageToken).to.equal("");
  });

  it("keycap calls search --principal: the newest page, and --page continues where it stopped", async function () {
    const one = await runCli(["calls", "search", "--principal", PRINCIPAL, "--limit", "120", "--json"], env());
    expect(one.code, one.stderr).to.equal(0);
    expect((JSON.parse(one.stdout) as { callId: string }[]).map((c) => c.callId)).to.deep.equal(expected.slice(0, 120).map((c) => c._id));
    const cursor = /--page (\S+)/.exec(one.stderr)?.[1];
    expect(cursor, one.stderr).to.be.a("string");
    const two = await runCli(["calls", "search", "--principal", PRINCIPAL, "--limit", "120", "--page", cursor!, "--json"], env());
    expect(two.code, two.stderr).to.equal(0);
    expect((JSON.parse(two.stdout) as { callId: string }[]).map((c) => c.callId)).to.deep.equal(expected.slice(120, 240).map((c) => c._id));
  });

  it("a call the kernel journals carries lb, its principal's marks are written, and the search finds it first", async function () {
    const runtime = new KernelClient(svc.endpoints.kernel!, { ledgerAddress: svc.endpoints.ledger!, coalesce: false });
    try {
      await runtime.registerTool({ id: "volume.fresh", effect: { kind: "idempotent", key: { fields: ["/n"] } } });
      const begun = await runtime.beginCall("volume.fresh", '{"n":1}', { callId: "fresh-1" });
      expect(begun.call?.principal).to.equal("local-runtime");
    } finally {
      runtime.close();
    }
    const stored = await db.collection<CallRecord>("calls").findOne({ _id: "fresh-1" });
    expect(stored?.lb).to.equal(listingBucketOf(stored!.created_at));
    // One insert (ADR 0034): no pending copy; its second is marked unsettled until the kernel settles it.
    expect(await db.collection<CallRecord>("pending_calls").findOne({ _id: "fresh-1" })).to.equal(null);
    expect(await db.collection("unsettled_seconds").countDocuments({ lb: stored?.lb })).to.be.greaterThan(0);
    const want = marksFor("calls", stored!.created_at, [{ scope: "principal", value: "local-runtime" }]).map((m) => m._id);
    const found = await db
      .collection<MarkDoc>("listing_marks")
      .find({ _id: { $in: want } })
      .toArray();
    expect(found.map((m) => m._id).sort()).to.deep.equal([...want].sort());
    expect((await operator.searchCallsPage({ principal: "local-runtime" })).calls.map((c) => c.callId)).to.deep.equal(["fresh-1"]);
  });

  it("a healed call gets lb and marks too; a call without a principal gets no marks", async function () {
    const journal = await CallJournal.open(db, createLogger("test", "silent"));
    try {
      const now = new Date();
      const base = (id: string): CallRecord => journaled(id, now, "healer");
      // The copy a BeginCall that crashed before its journal write left (written before lb was kept).
      await db.collection<CallRecord>("pending_calls").insertOne({ ...base("healed-1"), principal: "healer" });
      expect((await journal.require("healed-1")).lb).to.equal(listingBucketOf(now));
      expect((await db.collection<CallRecord>("calls").findOne({ _id: "healed-1" }))?.lb).to.equal(listingBucketOf(now));
      const healerMarks = marksFor("calls", now, [{ scope: "principal", value: "healer" }]).map((m) => m._id);
      expect(await db.collection<MarkDoc>("listing_marks").countDocuments({ _id: { $in: healerMarks } })).to.equal(healerMarks.length);
      expect((await journal.search({ field: "principal", value: "healer" }, undefined, undefined, 10)).calls.map((c) => c._id)).to.deep.equal(["healed-1"]);

      const marksBefore = await db.collection("listing_marks").countDocuments();
      await journal.begin(base("anonymous-1"));
      expect((await db.collection<CallRecord>("calls").findOne({ _id: "anonymous-1" }))?.lb).to.equal(listingBucketOf(now));
      expect(await db.collection("listing_marks").countDocuments()).to.equal(marksBefore);
    } finally {
      await journal.close();
    }
  });

  it("every read of a search (principal, key, run, call), the indeterminate listing and the gauge is an equality on an index (on PostgreSQL: planned on it)", async function () {
    // The kernel's own journal code, on a client that reports each command it sends.
    const watched = await MongoClient.connect(svc.env["MONGODB_URI"]!, { monitorCommands: true });
    const finds: { collection: string; filter: Document; command: Document }[] = [];
    watched.on("commandStarted", (e: CommandStartedEvent) => {
      if (e.commandName === "find") finds.push({ collection: String(e.command["find"]), filter: (e.command["filter"] ?? {}) as Document, command: e.command });
      for (const op of ["count", "aggregate", "distinct"]) {
        if (e.commandName === op && e.command[op] !== "pending_calls")
          finds.push({ collection: String(e.command[op]), filter: { [op]: true }, command: e.command });
      }
    });
    const journal = await CallJournal.open(watched.db(db.databaseName), createLogger("test", "silent"), { listTimeMs: 5_000 });
    try {
      finds.length = 0;
      const page = await journal.search({ field: "principal", value: PRINCIPAL }, undefined, undefined, 100);
      expect(page.calls.map((c) => c._id)).to.deep.equal(expected.slice(0, 100).map((c) => c._id));
      const next = await journal.search({ field: "principal", value: PRINCIPAL }, ["volume.preloaded"], page.next, 100);
      expect(next.calls.map((c) => c._id)).to.deep.equal(expected.slice(100, 200).map((c) => c._id));
      expect((await journal.search({ field: "key", value: "key-vc-00007" }, undefined, undefined, 10)).calls.map((c) => c._id)).to.deep.equal(["vc-00007"]);
      expect((await journal.search({ field: "run_id", value: "run-7" }, undefined, undefined, 1000)).calls).to.have.length(runSeven);
      expect((await journal.search({ field: "_id", value: "vc-00009" }, undefined, undefined, 10)).calls.map((c) => c.state)).to.deep.equal(["completed"]);
      const indeterminate = await journal.listIndeterminate("", undefined, 100);
      expect(indeterminate.calls.map((c) => c._id)).to.deep.equal(["ic-1", "ic-2", "ic-3", "ic-4"]);
      expect((await journal.counts()).indeterminate).to.equal(INDETERMINATE - 1);
    } finally {
      await journal.close();
    }
    expect(finds.length).to.be.greaterThan(10);
    const unbounded = finds.filter(({ collection, filter }) => {
      const fields = EQUALITY_INDEXED[collection];
      if (!fields) return !SMALL.includes(collection);
      return !fields.some((f) => ["string", "number", "boolean"].includes(typeof filter[f]));
    });
    expect(
      unbounded.map((f) => `${f.collection} ${JSON.stringify(f.filter)}`),
      "reads not bounded by an equality on an indexed field",
    ).to.deep.equal([]);

    if (testMongoBackend() === "ferretdb-pg") {
      // What PostgreSQL does with each (distinct) read FerretDB pushes down, and with the four named in the issue.
      const shapes = new Map<string, { collection: string; filter: Document }>();
      for (const f of finds) if (!SMALL.includes(f.collection)) shapes.set(`${f.collection} ${JSON.stringify(Object.keys(f.filter))}`, f);
      const second = listingBucketOf(expected[0]!.created_at);
      for (const f of [
        { collection: "calls", filter: { lb: second, principal: PRINCIPAL } },
        { collection: "listing_marks", filter: { up: `calls/principal/m/${second.slice(0, 12)}/${PRINCIPAL}` } },
        { collection: "calls", filter: { state: "indeterminate" } },
        { collection: "call_completions", filter: { _id: expected[0]!._id } },
      ])
        shapes.set(`named ${f.collection} ${JSON.stringify(f.filter)}`, f);
      const plans: string[] = [];
      for (const [name, f] of shapes) {
        const plan = planOf(await db.command({ explain: { find: f.collection, filter: f.filter } }));
        if (!plan.includes("Index Cond") || plan.includes("Seq Scan")) plans.push(`${name}: ${plan}`);
      }
      expect(plans, "reads PostgreSQL plans without an index").to.deep.equal([]);
    }
    await watched.close();
  });
});

/** A call as the journal stores it, its capability's claims filled in (unsigned). */
function journaled(id: string, at: Date, sub: string, extra: Partial<CallRecord> = {}): CallRecord {
  // No principal field unless `extra` gives one (a call without a principal gets no marks).
  const { principal: _principal, ...call } = journaledCall(id, { at, principal: sub, toolId: "volume.preloaded", runId: "", argumentsJson: "{}" });
  return { ...call, ...extra };
}
