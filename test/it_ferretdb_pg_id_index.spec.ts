/**
 * FerretDB v1.24 on PostgreSQL pushes {_id: v} down as `_jsonb -> '_id' @> v`, which its
 * own btree on `_jsonb -> '_id'` cannot answer: every read by _id scanned the table (the
 * bench's duplicate writes stalled for minutes at ~1M entries). The wrapper
 * (tools/ferretdb) gives every table a GIN index that can (ADR 0021). This holds that
 * PostgreSQL plans a read by _id on that index, for a new collection and for one that
 * existed before a restart on the same data directory.
 */
import { expect } from "chai";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { MongoClient, type Document } from "mongodb";
import { startMongoServer, type MongoServerHandle } from "../services/common/src/embedded-mongo";
import { createLogger } from "../services/common/src/logger";
import { testMongoBackend } from "./support/mongo";

/** The plan's node types and index conditions, from FerretDB's explain (PostgreSQL's EXPLAIN as JSON). */
function planOf(explain: Document): string {
  return JSON.stringify((explain["queryPlanner"] as Document | undefined)?.["Plan"] ?? explain);
}

async function explainFindById(client: MongoClient, collection: string, id: string): Promise<string> {
  return planOf(await client.db("idx").command({ explain: { find: collection, filter: { _id: id } } }));
}

/** 3,000 documents of ~500 bytes: enough that a scan is not the cheap plan. */
async function fill(client: MongoClient, collection: string): Promise<void> {
  const docs = Array.from({ length: 3000 }, (_, i) => ({ _id: `w:k${i}`, pad: "x".repeat(500) }));
  const coll = client.db("idx").collection<{ _id: string; pad: string }>(collection);
  for (let i = 0; i < docs.length; i += 1000) await coll.insertMany(docs.slice(i, i + 1000));
}

describe("FerretDB on PostgreSQL: reads by _id use an index (ADR 0021)", function () {
  this.timeout(180_000);
  let dataDir: string;
  let server: MongoServerHandle | undefined;
  let client: MongoClient | undefined;

  before(function () {
    // The wrapper's PostgreSQL backend only; the SQLite pass has its own behaviour (ADR 0007).
    if (testMongoBackend() !== "ferretdb-pg") this.skip();
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-pg-id-index-"));
  });

  after(async function () {
    await client?.close();
    await server?.stop();
    if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
  });

  async function start(): Promise<MongoClient> {
    server = await startMongoServer({ logger: createLogger("test", "silent"), uri: "", embedded: "ferretdb-pg", dataDir });
    client = await MongoClient.connect(server.uri);
    return client;
  }

  async function stop(): Promise<void> {
    await client?.close();
    await server?.stop();
    client = undefined;
    server = undefined;
  }

  it("plans findOne by _id as an index scan, not a sequential scan, for new and pre-existing collections", async function () {
    let c = await start();
    const entries = c.db("idx").collection<{ _id: string; pad: string }>("entries");
    await fill(c, "entries");

    const fresh = await explainFindById(c, "entries", "w:k2999");
    expect(fresh, "a new collection").to.include("Index Cond").and.not.include("Seq Scan");
    expect(await entries.findOne({ _id: "w:k2999" }), "the read still finds the document").to.deep.include({ _id: "w:k2999" });

    // Restart on the same cluster: the event trigger is not installed twice and the
    // existing table keeps (or gets) its index.
    await stop();
    c = await start();
    const again = await explainFindById(c, "entries", "w:k1");
    expect(again, "after a restart").to.include("Index Cond").and.not.include("Seq Scan");
    expect(await c.db("idx").collection("entries").countDocuments()).to.equal(3000);
    await fill(c, "second");
    expect(await explainFindById(c, "second", "w:k7"), "a collection created after the restart").to.include("Index Cond");
  });

  it("gives an eq_ index a GIN twin its equality reads use (ADR 0033), and no other index", async function () {
    const c = await start();
    const coll = c.db("idx").collection<{ _id: string; lb: string; other: string; pad: string }>("listed");
    const docs = Array.from({ length: 3000 }, (_, i) => ({ _id: `r${i}`, lb: `b${i % 300}`, other: `o${i % 300}`, pad: "x".repeat(500) }));
    for (let i = 0; i < docs.length; i += 1000) await coll.insertMany(docs.slice(i, i + 1000));
    // Created on a table that already holds rows (the trigger on CREATE INDEX) ...
    await coll.createIndex({ lb: 1 }, { name: "eq_lb" });
    await coll.createIndex({ other: 1 }, { name: "other" });
    const explain = async (filter: Document) => planOf(await c.db("idx").command({ explain: { find: "listed", filter } }));
    expect(await explain({ lb: "b7" }), "an eq_ index")
      .to.include("Index Cond")
      .and.not.include("Seq Scan");
    expect(await explain({ other: "o7" }), "an index not named eq_ gets no twin").to.include("Seq Scan");
    expect(await coll.countDocuments({ lb: "b7" })).to.equal(10);
    // ... and still there, not doubled, after a restart (the pass over existing indexes).
    await stop();
    const again = await start();
    expect(planOf(await again.db("idx").command({ explain: { find: "listed", filter: { lb: "b9" } } }))).to.include("Index Cond");
    expect((await again.db("idx").collection("listed").find({ lb: "b9" }).toArray()).map((d) => d["_id"]).sort()).to.have.length(10);
  });
});
