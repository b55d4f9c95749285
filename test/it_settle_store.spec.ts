/**
 * The settle store's read of a second's open calls (ADR 0034) against retention running at the
 * same time: a completed call swept between the read of its second and the read of its
 * completion must not come back as open — recovery would be sent to resume a call no longer in
 * the journal, and a pending copy written for it would heal it back in (torture 2026-12-06).
 */
import { expect } from "chai";
import { MongoClient, type Db } from "mongodb";
import { InsertBatcher } from "../services/common/src/insert-batcher";
import { createLogger } from "../services/common/src/logger";
import type { EntryRef } from "../services/kernel/src/call-settler";
import { MongoSettleStore, type UnsettledMark } from "../services/kernel/src/settle-store";
import { toStored, type StoredCall } from "../services/kernel/src/stored-call";
import { journaledCall } from "./support/journaled-call";
import { freshDatabaseName, testMongoUri } from "./support/mongo";

const SECOND = "20261206184900";

function call(id: string): StoredCall {
  const at = new Date("2026-12-06T18:49:00.500Z");
  return toStored(journaledCall(id, { at, argumentsJson: "{}" }, { mode: "shadow", lb: SECOND }));
}

describe("settle store: a second's open calls while retention sweeps", () => {
  let client: MongoClient;
  let db: Db;

  before(async () => {
    client = await MongoClient.connect(testMongoUri(), { serverSelectionTimeoutMS: 10_000 });
  });
  after(async () => client?.close());
  beforeEach(() => {
    db = client.db(freshDatabaseName("settle"));
  });

  /** A store whose completion read comes after retention removed `swept` (its journal document, then its completion). */
  function storeSweepingBetweenReads(swept: string): MongoSettleStore {
    const calls = db.collection<StoredCall>("calls");
    return new MongoSettleStore({
      instance: "replica-a",
      marks: db.collection<UnsettledMark>("unsettled_seconds"),
      calls,
      entries: db.collection<EntryRef>("entries"),
      copies: new InsertBatcher(db.collection<StoredCall>("pending_calls"), {
        writeConcern: { w: "majority" },
        unacknowledged: () => new Error("unacknowledged"),
      }),
      complete: () => Promise.resolve(),
      hasCompletion: async (id) => {
        if (id === swept) {
          await calls.deleteOne({ _id: swept });
          await db.collection("call_completions").deleteOne({ _id: swept } as never);
        }
        return (await db.collection("call_completions").findOne({ _id: id } as never)) !== null;
      },
      logger: createLogger("test", "silent"),
    });
  }

  it("leaves out a call swept between the two reads, keeps the one still open, and copies only that one when it settles the second", async () => {
    await db.collection<StoredCall>("calls").insertMany([call("swept-1"), call("open-1")]);
    await db.collection("call_completions").insertOne({ _id: "swept-1" } as never);
    const store = storeSweepingBetweenReads("swept-1");
    expect((await store.openCallsOf(SECOND)).map((o) => o.call._id).sort()).to.deep.equal(["open-1"]);

    await db.collection<StoredCall>("calls").insertOne(call("swept-2"));
    await db.collection("call_completions").insertOne({ _id: "swept-2" } as never);
    await db.collection<UnsettledMark>("unsettled_seconds").insertOne({ _id: `dead/${SECOND}/0`, lb: SECOND, instance: "dead", at: new Date(0) });
    await storeSweepingBetweenReads("swept-2").settleFromDatabase(SECOND, `dead/${SECOND}/0`);
    const copies = (await db.collection("pending_calls").find({}).toArray()).map((c) => c._id);
    expect(copies).to.deep.equal(["open-1"]);
    expect(await db.collection("unsettled_seconds").countDocuments()).to.equal(0);
  });
});
