/**
 * The journal's indexes are the ones its server reads with. FerretDB pushes down top-level
 * equality only, so the range indexes MongoDB sorts a run's, a key's and a principal's calls
 * with (`run_id`/`key`/`principal` with `created_at`) cost FerretDB every journal insert and
 * serve no read there (bench/README, "What limits the two-write call"); the equality indexes
 * its reads use stay.
 */
import { expect } from "chai";
import { MongoClient, type Db } from "mongodb";
import { createLogger } from "../services/common/src/logger";
import { isFerretDB } from "../services/common/src/mongo";
import { CallJournal } from "../services/kernel/src/call-journal";
import { freshDatabaseName, testMongoUri } from "./support/mongo";

const RANGE_KEYS: Record<string, 1 | -1>[] = [
  { run_id: 1, created_at: 1, _id: 1 },
  { key: 1, created_at: -1, _id: -1 },
  { principal: 1, created_at: -1, _id: -1 },
];

async function indexKeys(db: Db, collection = "calls"): Promise<string[]> {
  return (await db.collection(collection).listIndexes().toArray()).map((ix) => JSON.stringify(ix["key"]));
}

describe("call journal: the indexes its server reads with", () => {
  let client: MongoClient;

  before(async () => {
    client = await MongoClient.connect(testMongoUri(), { serverSelectionTimeoutMS: 10_000 });
  });
  after(async () => {
    await client?.close();
  });

  it("keeps the equality indexes everywhere, the range indexes only where the server uses them, and drops those an earlier version left on FerretDB", async () => {
    const db = client.db(freshDatabaseName("jix"));
    // What an earlier version created, before this one opens the journal.
    for (const key of RANGE_KEYS) await db.collection("calls").createIndex(key);
    await db.collection("call_completions").createIndex({ completed_at: 1 }, { name: "completed_at" });
    const journal = await CallJournal.open(db, createLogger("test", "warn"));
    try {
      const keys = await indexKeys(db);
      for (const field of ["run_id", "key", "state", "lb"]) expect(keys, field).to.include(JSON.stringify({ [field]: 1 }));
      const ranges = RANGE_KEYS.map((k) => JSON.stringify(k)).filter((k) => keys.includes(k));
      const byTime = (await indexKeys(db, "call_completions")).includes(JSON.stringify({ completed_at: 1 }));
      if (await isFerretDB(db)) {
        expect(ranges, "range indexes on FerretDB").to.deep.equal([]);
        expect(byTime, "completions by time on FerretDB").to.equal(false);
      } else {
        expect(ranges, "range indexes on MongoDB").to.have.length(3);
        expect(byTime, "completions by time on MongoDB").to.equal(true);
      }
      // Opening again (a restart) finds nothing to drop and nothing to create.
      await (await CallJournal.open(db, createLogger("test", "warn"))).close();
      expect(await indexKeys(db)).to.have.members(keys);
      expect((await indexKeys(db, "call_completions")).includes(JSON.stringify({ completed_at: 1 }))).to.equal(byTime);
    } finally {
      await journal.close();
    }
  });
});
