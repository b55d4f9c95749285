/**
 * The bench's peer scenario and scale-out scenario rest on three pieces that could break
 * quietly and still produce numbers: the round robin over kernel/ledger pairs (a skew
 * would measure one kernel twice), the Redis the bench starts and must stop (a leak
 * outlives the run), and the peer itself (Powertools idempotency around the baseline's
 * insert: a repeat must not insert again, or the peer does less work than it claims).
 */
import { expect } from "chai";
import * as fs from "node:fs";
import { CachePersistenceLayer } from "@aws-lambda-powertools/idempotency/cache";
import { createClient } from "@redis/client";
import { MongoClient } from "mongodb";
import { BaselineWriter } from "../bench/baseline-server";
import { PeerWriter } from "../bench/peer-server";
import { pingRedis, startRedis, type RedisHandle } from "../bench/redis";
import { crossPairs, RoundRobin } from "../bench/round-robin";
import { EntryStore } from "../services/ledger/src/entry-store";
import { freshDatabaseName, testMongoUri } from "./support/mongo";

describe("bench round robin", () => {
  it("alternates kernels on every pick and gives every kernel, ledger and pair the same share", () => {
    const rr = new RoundRobin(crossPairs(["k1", "k2"], ["l1", "l2"]));
    expect(rr.size).to.equal(4);
    const picks = Array.from({ length: 400 }, () => rr.next());
    for (let i = 1; i < picks.length; i++) expect(picks[i]!.kernel).to.not.equal(picks[i - 1]!.kernel);
    const count = (f: (p: { kernel: string; ledger: string }) => string): Record<string, number> => {
      const out: Record<string, number> = {};
      for (const p of picks) out[f(p)] = (out[f(p)] ?? 0) + 1;
      return out;
    };
    expect(count((p) => p.kernel)).to.deep.equal({ k1: 200, k2: 200 });
    expect(count((p) => p.ledger)).to.deep.equal({ l1: 200, l2: 200 });
    expect(count((p) => `${p.kernel}/${p.ledger}`)).to.deep.equal({ "k1/l1": 100, "k2/l1": 100, "k1/l2": 100, "k2/l2": 100 });
  });

  it("covers uneven counts and refuses an empty list", () => {
    const pairs = crossPairs(["a", "b", "c"], [1, 2]);
    expect(pairs.map((p) => `${p.kernel}${p.ledger}`)).to.deep.equal(["a1", "b1", "c1", "a2", "b2", "c2"]);
    expect(() => new RoundRobin([])).to.throw(/at least one/);
  });
});

describe("bench peer (Powertools idempotency on Redis)", function () {
  this.timeout(120_000);
  let redis: RedisHandle;
  let mongo: MongoClient;

  before(async function () {
    this.timeout(180_000); // the first run may install redis-server with apt-get
    redis = await startRedis({ log: (m) => process.stdout.write(`      ${m}\n`) });
    mongo = await MongoClient.connect(testMongoUri(), { serverSelectionTimeoutMS: 10_000 });
  });

  after(async () => {
    await mongo?.close();
    await redis?.stop();
  });

  it("starts redis-server on a loopback port it answers PING on, and stops it (process gone)", async () => {
    const other = await startRedis();
    expect(other.port).to.not.equal(redis.port);
    await pingRedis(other.port);
    const pid = other.pid;
    await other.stop();
    expect(fs.existsSync(`/proc/${pid}`), "redis-server still running after stop").to.equal(false);
    let refused = false;
    await pingRedis(other.port, 500).catch(() => (refused = true));
    expect(refused).to.equal(true);
  });

  it("inserts once per key; a repeat answers the stored response as a duplicate without inserting", async () => {
    const db = mongo.db(freshDatabaseName("peer"));
    const entries = await EntryStore.open(db);
    const client = await createClient({ url: redis.url }).connect();
    try {
      const peer = new PeerWriter(new BaselineWriter(entries, 1024 * 1024), new CachePersistenceLayer({ client }));
      const payload = Buffer.from("effect");
      const first = await peer.write({ key: "order-1", payload });
      expect(first.duplicate).to.equal(false);
      const again = await peer.write({ key: "order-1", payload });
      expect(again.duplicate).to.equal(true);
      expect(again.entry?.entryId).to.equal(first.entry?.entryId);
      const other = await peer.write({ key: "order-2", payload });
      expect(other.duplicate).to.equal(false);
      // Two at once under one key: one inserts, the other is refused while it is in flight.
      const racing = await Promise.allSettled([peer.write({ key: "order-3", payload }), peer.write({ key: "order-3", payload })]);
      expect(racing.filter((r) => r.status === "fulfilled" && !r.value.duplicate)).to.have.length(1);
      for (const r of racing) if (r.status === "rejected") expect(r.reason).to.have.property("reason", "IN_PROGRESS");
      expect(await db.collection("entries").countDocuments({})).to.equal(3);
      // The records live in Redis under the peer's prefix, completed.
      const keys = await client.keys("keycap-bench-peer*");
      expect(keys).to.have.length(3);
      expect(JSON.parse((await client.get(keys[0]!))!)).to.have.property("status", "COMPLETED");
    } finally {
      client.destroy();
    }
  });
});
