/**
 * What one whole call costs the kernel's database, counted on the wire (bench/wire-tap.ts):
 * BeginCall journals with two inserts, CompleteCall answers after one insert (no read
 * for a call this replica began), and the pending copies of finished calls leave in
 * batches, one delete for many calls, after the answers. A regression that adds a round
 * trip to the call path fails here, whatever the timing.
 */
import { expect } from "chai";
import { MongoClient } from "mongodb";
import { targetOf, viaTap, WireTap } from "../bench/wire-tap";
import { createLogger } from "../services/common/src/logger";
import { CallJournal, type CallRecord } from "../services/kernel/src/call-journal";
import { journaledCall } from "./support/journaled-call";
import { freshDatabaseName, testMongoUri } from "./support/mongo";

function record(id: string, now = new Date()): CallRecord {
  return journaledCall(id, { at: now });
}

const QUIET = { tickMs: 3_600_000 };

describe("call journal round trips", () => {
  let tap: WireTap;
  let client: MongoClient;
  let journal: CallJournal;
  let dbName: string;

  beforeEach(async () => {
    tap = await WireTap.start(targetOf(testMongoUri()));
    client = await MongoClient.connect(viaTap(testMongoUri(), tap), { serverSelectionTimeoutMS: 10_000 });
    dbName = freshDatabaseName("rt");
    // The settler's background passes (ADR 0034) would add their reads to a step's count: none during a test.
    journal = await CallJournal.open(client.db(dbName), createLogger("test", "silent"), { settle: QUIET });
  });

  afterEach(async () => {
    await journal?.close();
    await client?.close();
    await tap?.stop();
  });

  const counts = (): Record<string, number> => Object.fromEntries(tap.snapshot().commands.map((c) => [`${c.command} ${c.collection}`, c.count] as const));

  it("a call begun and completed here: one insert to begin, one to complete (and a second's first marks), nothing read (ADR 0034)", async () => {
    // The first call of a principal in a second also writes that second's listing marks (ADR 0033),
    // once per process: the next call of the same second does not.
    const at = new Date();
    // (Another second's first call opens the pool's second connection: its marks and the copy go in parallel.)
    await journal.begin(record("c-warm", new Date(at.getTime() - 5000)));
    tap.reset();
    await journal.begin(record("c-0", at));
    // The second's first call also marks it unsettled (once per second and replica).
    expect(counts()).to.deep.equal({ "insert unsettled_seconds": 1, "insert listing_marks": 1, "insert calls": 1 });
    tap.reset();
    await journal.begin(record("c-1", at));
    expect(counts()).to.deep.equal({ "insert calls": 1 });
    tap.reset();
    const { call, alreadyCompleted } = await journal.complete("c-1", "succeeded", "");
    expect(alreadyCompleted).to.equal(false);
    expect(call).to.include({ _id: "c-1", state: "completed", outcome: "succeeded", tool_id: "rt.tool" });
    // The first completion this process writes in a second also marks that second, for retention.
    expect(counts()).to.deep.equal({ "insert listing_marks": 1, "insert call_completions": 1 });
    tap.reset();
    const second = Math.floor(Date.now() / 1000);
    await journal.complete("c-0", "succeeded", "");
    const c = counts();
    expect(c["insert call_completions"]).to.equal(1);
    // In the same second: its mark is known, nothing more (a second boundary between may add one).
    if (Math.floor(Date.now() / 1000) === second) expect(c).to.deep.equal({ "insert call_completions": 1 });
  });

  it("removes the pending copies of 100 completed calls in two deletes (a batch of 64, then the rest), and none is listed as pending", async () => {
    await journal.close();
    // No timer flush within the test: the batch size and the final drain decide.
    // Calls journaled the way a replica holding its bound of open calls does: copy first (ADR 0034).
    journal = await CallJournal.open(client.db(dbName), createLogger("test", "silent"), {
      sweep: { batch: 64, maxDelayMs: 600_000 },
      settle: { ...QUIET, maxCalls: 0 },
    });
    const ids = Array.from({ length: 100 }, (_, i) => `b-${i}`);
    for (const id of ids) await journal.begin(record(id));
    tap.reset();
    for (const id of ids) await journal.complete(id, "succeeded", "");
    await journal.close(); // drains the batched removals
    const c = counts();
    expect(c["insert call_completions"]).to.equal(100);
    expect(c["delete pending_calls"]).to.equal(2);
    const left = await client
      .db(dbName)
      .collection("pending_calls")
      .countDocuments({ _id: { $in: ids } } as never);
    expect(left).to.equal(0);
    expect((await journal.listPending("", undefined, 200)).calls).to.have.length(0);
  });

  it("completes a call another replica began (one read proves it exists) and refuses one nobody began", async () => {
    await journal.begin(record("other-1"));
    const other = await CallJournal.open(client.db(dbName), createLogger("test", "silent"), { settle: QUIET });
    try {
      tap.reset();
      expect((await other.complete("other-1", "failed", "boom")).call).to.include({ state: "completed", outcome: "failed" });
      expect(counts()).to.include({ "find calls": 1, "insert call_completions": 1 });
      let caught: unknown;
      try {
        await other.complete("nobody", "failed", "");
      } catch (err) {
        caught = err;
      }
      expect(caught).to.have.property("reason", "CALL_NOT_FOUND");
      // and the replica that began it learns the outcome from the completion, not its memory
      expect((await journal.complete("other-1", "failed", "boom")).alreadyCompleted).to.equal(true);
    } finally {
      await other.close();
    }
  });
});

/**
 * A BeginCall whose journal insert the database applied but whose answer the network lost
 * (the database killed mid-answer, torture 2026-12-06): the kernel answers UNAVAILABLE, the
 * call is journaled anyway, and it must never be left where no listing finds it — an orphan
 * no recovery would retry.
 */
describe("a BeginCall whose answer the network lost (ADR 0034)", () => {
  let tap: WireTap;
  let client: MongoClient;
  let direct: MongoClient;
  let journal: CallJournal;
  let dbName: string;

  beforeEach(async () => {
    tap = await WireTap.start(targetOf(testMongoUri()));
    // No driver retry of the write: the kernel itself sees the lost answer.
    client = await MongoClient.connect(viaTap(testMongoUri(), tap), { serverSelectionTimeoutMS: 10_000, retryWrites: false });
    direct = await MongoClient.connect(testMongoUri(), { serverSelectionTimeoutMS: 10_000 });
    dbName = freshDatabaseName("lost");
    journal = await CallJournal.open(client.db(dbName), createLogger("test", "silent"), { settle: { tickMs: 100, settleAfterMs: 300 } });
  });

  afterEach(async () => {
    await journal?.close();
    await client?.close();
    await direct?.close();
    await tap?.stop();
  });

  /** Waits until the settler has had time to settle the call's second, then lists the pending calls. */
  async function pendingAfterSettling(): Promise<string[]> {
    await new Promise((r) => setTimeout(r, 3_000));
    return (await journal.listPending("", undefined, 50)).calls.map((c) => c._id);
  }

  it("the call the database journaled stays listed pending (a pending copy) once its second is settled", async () => {
    const lost = tap.loseAnswerTo("insert", "calls");
    const begun = journal.begin(record("lost-1"));
    await lost;
    let caught: unknown;
    try {
      await begun;
    } catch (err) {
      caught = err;
    }
    expect(caught, "the caller must not be told the call was journaled").to.be.instanceOf(Error);
    expect(
      await direct
        .db(dbName)
        .collection("calls")
        .countDocuments({ _id: "lost-1" } as never),
    ).to.equal(1);
    expect(await pendingAfterSettling()).to.include("lost-1");
    expect(
      await direct
        .db(dbName)
        .collection("pending_calls")
        .countDocuments({ _id: "lost-1" } as never),
    ).to.equal(1);
  });

  it("a BeginCall retried on another replica finds the call journaled, and that replica gives it its pending copy once its second is settled", async () => {
    const lost = tap.loseAnswerTo("insert", "calls");
    const first = record("lost-2");
    await Promise.allSettled([journal.begin(first), lost]);
    // The first replica is cut off from the database from here on, as if killed: its mark of
    // the second stays until another replica adopts it (35 s), which this test does not wait for.
    await tap.stop();
    const other = await CallJournal.open(direct.db(dbName), createLogger("test", "silent"), { settle: { tickMs: 100, settleAfterMs: 300 } });
    try {
      // The runtime retries with the same call: a later record of the same call id and arguments.
      const { existing, call } = await other.begin({ ...record("lost-2"), created_at: new Date(first.created_at.getTime() + 1_500) });
      expect(existing).to.equal(true);
      expect(call.state).to.equal("pending");
      await new Promise((r) => setTimeout(r, 3_000));
      expect(
        await direct
          .db(dbName)
          .collection("pending_calls")
          .countDocuments({ _id: "lost-2" } as never),
      ).to.equal(1);
      expect((await other.listPending("", undefined, 50)).calls.map((c) => c._id)).to.include("lost-2");
    } finally {
      await other.close();
    }
  });
});
