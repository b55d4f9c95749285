/**
 * Group commit (services/common/src/insert-batcher.ts) against the real MongoDB-protocol
 * server: every document answered as if inserted alone — inserted, duplicate key, the
 * command's failure — while concurrent documents share commands.
 */
import { expect } from "chai";
import { MongoClient, type Collection } from "mongodb";
import { startMongoServer } from "../services/common/src/embedded-mongo";
import { createLogger } from "../services/common/src/logger";
import { InsertBatcher } from "../services/common/src/insert-batcher";
import { isDatabaseUnavailable, isDuplicateKey } from "../services/common/src/mongo";
import { freshDatabaseName, testMongoBackend, testMongoUri } from "./support/mongo";

interface Doc {
  _id: string;
  body: string;
}

/** Inserts n documents at once; each one's error (undefined when it was stored). */
function concurrentInsertErrors(b: InsertBatcher<Doc>, n: number): Promise<unknown[]> {
  return Promise.all(
    Array.from({ length: n }, (_, i) =>
      b.insert({ _id: `after-${i}`, body: "x" }).then(
        () => undefined,
        (err: unknown) => err,
      ),
    ),
  );
}

describe("InsertBatcher: concurrent inserts share commands, each answered on its own", function () {
  this.timeout(60_000);
  let client: MongoClient;
  let coll: Collection<Doc>;
  /** Documents per `insert` command, in the order sent. */
  let commands: number[];

  beforeEach(async function () {
    commands = [];
    client = new MongoClient(testMongoUri(), { monitorCommands: true });
    client.on("commandStarted", (e) => {
      if (e.commandName === "insert") commands.push((e.command["documents"] as unknown[]).length);
    });
    await client.connect();
    coll = client.db(freshDatabaseName("batch")).collection<Doc>("docs");
  });

  afterEach(async function () {
    await client.close();
  });

  const batcher = (opts: { maxDocs?: number; maxBytes?: number } = {}): InsertBatcher<Doc> =>
    new InsertBatcher(coll, { writeConcern: { w: "majority" }, sizeOf: (d) => d.body.length, unacknowledged: () => new Error("unacknowledged"), ...opts });

  it("300 inserts of one turn: all stored, in commands of at most maxDocs (256), sent on the next turn", async function () {
    const b = batcher();
    await Promise.all(Array.from({ length: 300 }, (_, i) => b.insert({ _id: `d${i}`, body: "x" })));
    expect(await coll.countDocuments({})).to.equal(300);
    expect(commands, "one turn's documents go together, capped at maxDocs").to.deep.equal([256, 44]);
  });

  it("one at a time (nothing in flight) each document is its own command", async function () {
    const b = batcher();
    for (let i = 0; i < 5; i++) await b.insert({ _id: `s${i}`, body: "x" });
    expect(commands).to.deep.equal([1, 1, 1, 1, 1]);
  });

  it("duplicates are refused one by one with the duplicate-key error, inside a command and across commands; the rest are stored", async function () {
    await coll.insertMany([
      { _id: "old-1", body: "first" },
      { _id: "old-2", body: "first" },
    ]);
    const b = batcher();
    const ids = ["warm", "old-1", "new-1", "old-2", "twice", "twice", "new-2"];
    const results = await Promise.all(
      ids.map((id, i) =>
        b.insert({ _id: id, body: `second-${i}` }).then(
          () => "inserted",
          (err: unknown) => (isDuplicateKey(err) ? "duplicate" : `error ${String(err)}`),
        ),
      ),
    );
    expect(results.slice(0, 5)).to.deep.equal(["inserted", "duplicate", "inserted", "duplicate", "inserted"]);
    expect(results[5]).to.equal("duplicate"); // the second "twice" of the same command
    expect(results[6]).to.equal("inserted");
    expect((await coll.findOne({ _id: "old-1" }))?.body, "a duplicate overwrites nothing").to.equal("first");
    expect(await coll.countDocuments({})).to.equal(6);
    expect(commands.length, "several documents per command").to.be.below(ids.length);
  });

  it("a document larger than maxBytes goes alone; maxDocs caps a command", async function () {
    const b = batcher({ maxDocs: 3, maxBytes: 100 });
    const gate = b.insert({ _id: "gate", body: "x" });
    await new Promise((resolve) => setImmediate(resolve)); // the gate is sent: the others queue behind it
    const rest = [
      b.insert({ _id: "a", body: "x".repeat(40) }),
      b.insert({ _id: "b", body: "x".repeat(40) }),
      b.insert({ _id: "big", body: "x".repeat(500) }),
      b.insert({ _id: "c", body: "x" }),
      b.insert({ _id: "d", body: "x" }),
      b.insert({ _id: "e", body: "x" }),
      b.insert({ _id: "f", body: "x" }),
    ];
    await Promise.all([gate, ...rest]);
    expect(commands).to.deep.equal([1, 2, 1, 3, 1]);
    expect(await coll.countDocuments({})).to.equal(8);
  });

  it("a server SIGKILLed under a batch: every document of every command fails with an error that says retry (never one that maps to INTERNAL)", async function () {
    // Found by the torture pass: insertMany wraps a driver error (network, pool) in a
    // MongoBulkWriteError that no longer says "unreachable", so callers answered INTERNAL.
    const backend = testMongoBackend() === "ferretdb-pg" ? "ferretdb-pg" : "ferretdb-sqlite";
    const own = await startMongoServer({ logger: createLogger("test", "silent"), uri: "", embedded: backend });
    const c = new MongoClient(own.uri, { serverSelectionTimeoutMS: 2000 });
    try {
      await c.connect();
      // The deadline bounds the driver's hang on a socket the kill destroyed (ADR 0020).
      const b = new InsertBatcher(c.db("killed").collection<Doc>("docs"), {
        writeConcern: { w: "majority" },
        unacknowledged: () => new Error("unacknowledged"),
        commandTimeoutMs: 3000,
      });
      await b.insert({ _id: "before", body: "x" });
      process.kill(own.pid!, "SIGKILL");
      await own.exited;
      const errors = await concurrentInsertErrors(b, 20);
      for (const err of errors) expect(isDatabaseUnavailable(err), String(err)).to.equal(true);
    } finally {
      await c.close();
      await own.stop();
    }
  });

  it("a server that stops answering (SIGSTOP): a lone document and a batch each fail after the deadline with an error that says retry; after SIGCONT the batcher serves again and a retry stores each document once", async function () {
    const backend = testMongoBackend() === "ferretdb-pg" ? "ferretdb-pg" : "ferretdb-sqlite";
    const own = await startMongoServer({ logger: createLogger("test", "silent"), uri: "", embedded: backend });
    const c = new MongoClient(own.uri, { serverSelectionTimeoutMS: 2000 });
    let stopped = false;
    try {
      await c.connect();
      const docs = c.db("stopped").collection<Doc>("docs");
      const b = new InsertBatcher(docs, { writeConcern: { w: "majority" }, unacknowledged: () => new Error("unacknowledged"), commandTimeoutMs: 1500 });
      await b.insert({ _id: "before", body: "x" });
      process.kill(own.pid!, "SIGSTOP");
      stopped = true;
      const started = Date.now();
      const lone = await b.insert({ _id: "lone", body: "x" }).then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(isDatabaseUnavailable(lone), String(lone)).to.equal(true);
      const batch = await concurrentInsertErrors(b, 10);
      for (const err of batch) expect(isDatabaseUnavailable(err), String(err)).to.equal(true);
      expect(Date.now() - started, "each command waited for its deadline, no longer").to.be.below(10_000);
      process.kill(own.pid!, "SIGCONT");
      stopped = false;
      // The stopped server may still have applied what it had read: the retry is keyed by _id.
      const ids = ["lone", ...Array.from({ length: 10 }, (_, i) => `after-${i}`), "fresh"];
      const retried = await Promise.all(
        ids.map((id) =>
          b.insert({ _id: id, body: "x" }).then(
            () => "stored",
            (err: unknown) => (isDuplicateKey(err) ? "stored" : String(err)),
          ),
        ),
      );
      expect(retried).to.deep.equal(ids.map(() => "stored"));
      expect(await docs.countDocuments({})).to.equal(ids.length + 1);
    } finally {
      if (stopped) process.kill(own.pid!, "SIGCONT");
      await c.close();
      await own.stop();
    }
  });

  it("a command that cannot reach the server fails every document in it with an error that says retry", async function () {
    const b = batcher();
    await b.insert({ _id: "before", body: "x" });
    await client.close();
    const errors = await concurrentInsertErrors(b, 5);
    for (const err of errors) expect(isDatabaseUnavailable(err), String(err)).to.equal(true);
  });
});
