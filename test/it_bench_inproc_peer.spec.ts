/**
 * The in-process peer (scenario `peer-inproc`, issue 34 item 3): the gRPC peer's
 * Powertools-on-Redis writer run inside the load-driving process. Its ratio is only worth
 * reading if three things hold: it is the same writer doing the same work (one insert per
 * key, a repeat answered from Redis), it is measured beside the gRPC peer in the same
 * repetitions (interleaved, so drift lands on both), and both ratios reach the report.
 */
import { expect } from "chai";
import { execFile } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { createClient } from "@redis/client";
import { MongoClient } from "mongodb";
import { openInProcessPeer, PEER_KEY_PREFIX } from "../bench/peer-server";
import { attachRatios, attachSpreads } from "../bench/ratios";
import { startRedis, type RedisHandle } from "../bench/redis";
import { checkTargets, markdown, wholeEffectMarkdown, type BenchRecord, type RunResult } from "../bench/report";
import { CALL, PEER, PEER_INPROC } from "../bench/scenarios";
import { loadConfig } from "../services/common/src/config";
import { benchRow as row } from "./support/bench-rows";
import { freshDatabaseName, testMongoUri } from "./support/mongo";

describe("bench in-process peer (Powertools idempotency on Redis inside the load driver)", function () {
  this.timeout(300_000);
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

  it("is the gRPC peer's writer in this process: one insert per key, a repeat answered from Redis, on the configured database", async () => {
    const database = freshDatabaseName("inproc");
    const peer = await openInProcessPeer(loadConfig({ MONGODB_URI: testMongoUri(), KEYCAP_MONGODB_DATABASE: database }), testMongoUri(), redis.url);
    const client = await createClient({ url: redis.url }).connect();
    try {
      const payload = Buffer.from("effect");
      const first = await peer.writer.write({ key: "inproc-1", payload });
      expect(first.duplicate).to.equal(false);
      const again = await peer.writer.write({ key: "inproc-1", payload });
      expect(again.duplicate).to.equal(true);
      expect(again.entry?.entryId).to.equal(first.entry?.entryId);
      expect((await peer.writer.write({ key: "inproc-2", payload })).duplicate).to.equal(false);
      const entries = mongo.db(database).collection("entries");
      expect(await entries.countDocuments({})).to.equal(2);
      // The baseline's document: `idem:<key>` under the unique index, the payload as sent.
      const doc = await entries.findOne({ key: "inproc-1" });
      expect(doc?._id).to.match(/^idem:/);
      expect(doc?.["entry_id"]).to.equal(first.entry?.entryId);
      const keys = await client.keys(`${PEER_KEY_PREFIX}*`);
      expect(keys).to.have.length(2);
      for (const k of keys) expect(JSON.parse((await client.get(k))!)).to.have.property("status", "COMPLETED");
    } finally {
      client.destroy();
      await peer.close();
    }
  });

  it("gives the whole call both ratios within each repetition, and the report prints both and the issue-34 target", () => {
    const reps = [0, 1].flatMap((rep) => [
      row(CALL, 64, 600 + 200 * rep, 100, rep),
      row(PEER, 64, 2000, 50, rep),
      row(PEER_INPROC, 64, 3000 + 2000 * rep, 25, rep),
    ]);
    for (const rep of [0, 1]) attachRatios(reps.filter((r) => r.rep === rep));
    const call0 = reps[0]!;
    expect(call0.vsPeer?.throughput).to.be.closeTo(0.3, 1e-9);
    expect(call0.vsInproc?.throughput).to.be.closeTo(0.2, 1e-9);
    expect(call0.vsInproc?.p99).to.be.closeTo(4, 1e-9);
    // Neither peer gets a ratio to itself or to the other.
    expect(reps.filter((r) => r.scenario !== CALL).every((r) => !r.vsPeer && !r.vsInproc)).to.equal(true);

    const runs = [row(CALL, 64, 700, 100), row(PEER, 64, 2000, 50), row(PEER_INPROC, 64, 4000, 25)];
    attachSpreads(runs, reps);
    // Its CPU: the load driver (the peer inside it), Redis, the database.
    const use = (cpuSeconds: number): RunResult["services"][string] => ({
      cpuSeconds,
      cores: cpuSeconds,
      peakRssMiB: 1,
      hwmMiB: 1,
      endRssMiB: 1,
      cpuMicrosPerRequest: 0,
    });
    runs[2]!.services = { driver: use(0.5), redis: use(0.04), db: use(0.8) };
    const call = runs[0]!;
    expect(call.vsInproc?.spread?.throughput).to.deep.include({ reps: 2, min: 0.16 });
    expect(call.vsInproc?.spread?.throughput.max).to.be.closeTo(0.2, 1e-9);
    expect(call.vsInproc?.throughput).to.be.closeTo(0.18, 1e-9);

    const rec = { runs, micro: [], parameters: { microPinnedToOneCore: false } } as unknown as BenchRecord;
    const table = wholeEffectMarkdown(rec);
    expect(table).to.include("| call ÷ in-proc req/s | call ÷ in-proc p99 |");
    const line = table.split("\n").find((l) => l.startsWith("| 64 |"))!;
    expect(line).to.include("| 4,000 | 25.0 | 0.18 (0.16–0.20) |");
    expect(table).to.match(/\| 64 \| .* \| peer\+driver 125, redis 10, db 200 \| – \|$/m);
    const targets = checkTargets(runs, [], undefined);
    expect(targets.find((t) => t.target.includes("in-process peer"))).to.deep.include({
      target: "whole call ≥ 0.3× the in-process peer at c=64 (issue 34)",
      measured: "0.18 (0.16–0.20)×",
      met: false,
    });
    expect(targets.find((t) => t.target.includes("gRPC peer"))).to.have.property("met", false);
  });

  it("make bench runs peer-inproc at the gRPC peer's levels, right after it in every repetition, and reports both ratios", async function () {
    this.timeout(600_000);
    const out = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-bench-inproc-"));
    try {
      const { stdout } = await promisify(execFile)(
        process.execPath,
        [
          "dist/bench/run.js",
          "--quick",
          "--scenarios",
          `${CALL},${PEER},${PEER_INPROC}`,
          "--concurrency",
          "1,4",
          "--seconds",
          "0.5",
          "--reps",
          "2",
          "--results-dir",
          out,
        ],
        { maxBuffer: 16 * 1024 * 1024, timeout: 540_000 },
      );
      const files = fs.readdirSync(out).filter((f) => f.endsWith(".json"));
      expect(files).to.have.length(1);
      const rec = JSON.parse(fs.readFileSync(path.join(out, files[0]!), "utf8")) as BenchRecord;

      // Interleaved: in each repetition and level, the in-process peer right after the gRPC one.
      const order = rec.repetitions!.map((r) => `${r.rep}@${r.concurrency}:${r.scenario}`);
      const expected = [0, 1].flatMap((rep) => [1, 4].flatMap((c) => [CALL, PEER, PEER_INPROC].map((s) => `${rep}@${c}:${s}`)));
      expect(order).to.deep.equal(expected);

      for (const c of [1, 4]) {
        const at = (s: string): RunResult => rec.runs.find((r) => r.scenario === s && r.concurrency === c)!;
        const inproc = at(PEER_INPROC);
        expect(inproc, `peer-inproc at c=${c}`).to.not.equal(undefined);
        expect(inproc.expected).to.be.greaterThan(0);
        expect(inproc.errors).to.equal(0);
        // No service process: the load driver (with the peer in it), Redis and the database are sampled.
        expect(inproc.services).to.have.property("driver");
        expect(inproc.services).to.have.property("redis");
        expect(inproc.services).to.not.have.property("ledger");
        expect(inproc.services).to.not.have.property("kernel");
        expect(Object.hasOwn(inproc.services, "db")).to.equal(Object.hasOwn(at(CALL).services, "db"));
        expect(at(PEER).services).to.have.property("ledger");
        const call = at(CALL);
        expect(call.vsPeer?.spread?.throughput.reps).to.equal(2);
        expect(call.vsInproc?.spread?.throughput.reps).to.equal(2);
        expect(call.vsInproc!.throughput).to.be.greaterThan(0);
      }
      expect(rec.versions.redis).to.match(/Redis server/i);
      expect(stdout).to.match(/\| peer-inproc \| node \| 4 \|/);
      expect(stdout).to.include("call ÷ in-proc req/s");
      expect(stdout).to.match(/\| 4 \| .*\| peer\+driver \d/);
      expect(stdout).to.match(/whole call ≥ 0\.3× the in-process peer at c=4 \(issue 34\) \| \d/);
      expect(markdown(rec)).to.equal(stdout);
    } finally {
      fs.rmSync(out, { recursive: true, force: true });
    }
  });
});
