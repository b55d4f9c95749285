/**
 * Issue 15: a short, seeded pass of the kill-anything torture test (test/torture/)
 * on the backend this run uses: the MongoDB-protocol server, the kernel, two
 * ledger replicas and a worker running the TypeScript runtime, SIGKILLed at
 * random and at fault points, restarted and recovered; then the independent
 * checker. `make torture` runs the long version (≥ 1,000 kills, both backends).
 */
import { expect } from "chai";
import { findChildPids } from "../bench/proc-sampler";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { MongoClient } from "mongodb";
import { freshDatabaseName, testMongoBackend, testMongoUri } from "./support/mongo";
import { check } from "./torture/checker";
import { runTorture } from "./torture/torture";
import { violations } from "./torture/verdict";

describe("torture: SIGKILL anything, recover, check (issue 15)", function () {
  it("a seeded pass of 40 kills, retention on at seconds-long settings: no duplicate effect, no lost acknowledged write, nothing left pending or orphaned, no Unsafe retry, only retryable errors, no live effect of a shadow or replay call", async function () {
    this.timeout(240_000);
    const backend = testMongoBackend() === "ferretdb-pg" ? "ferretdb-pg" : "ferretdb-sqlite";
    const seed = Number(process.env["KEYCAP_TORTURE_SEED"] ?? "20261203");
    // Progress on stderr with timestamps: if the pass ever outlives its timeout, the log says in which phase.
    const t0 = Date.now();
    const progress = (line: string): void => void process.stderr.write(`      torture +${((Date.now() - t0) / 1000).toFixed(0)} s: ${line}\n`);
    // The pass gives up on its own before the runner's timeout, naming its phase and what the processes said last.
    const kills = Number(process.env["KEYCAP_TORTURE_KILLS"] ?? "40");
    const report = await runTorture({ backend, kills, seed, progress, deadlineMs: 220_000 });
    process.stdout.write(
      `      ${backend} seed ${seed}: ${report.totalKills} kills ${JSON.stringify(report.kills)}, fault points ${JSON.stringify(report.faultPointKills)}; ` +
        `${report.planned} planned, ${report.acknowledged} acknowledged, ${report.completed} completed, ${report.sweptCalls} swept by retention, ${report.journaledCalls} still journaled, ` +
        `${report.entries} entries, ${report.indeterminate} indeterminate; ` +
        `sandbox: ${report.sandboxCalls} calls, ${report.shadowAcks} shadow and ${report.replayAcks} replayed writes, ${report.deniedUnsafe} Unsafe denied; ` +
        `errors ${JSON.stringify(report.workerErrors)} (${report.seconds} s)\n`,
    );
    expect(violations(report), JSON.stringify(report.examples)).to.deep.equal([]);
    expect(report.totalKills).to.be.at.least(kills);
    // The sandbox lanes ran (issue 30): shadow writes, replayed writes and denied Unsafe calls were all exercised.
    expect(
      [report.shadowAcks, report.replayAcks, report.deniedUnsafe].every((n) => n > 0),
      "sandbox lanes exercised",
    ).to.equal(true);
    // Retention ran under the kills (issue 32 item 3): completed calls left the journal.
    expect(report.sweptCalls, "completed calls retention removed").to.be.above(0);
    // Nothing it started outlives it: a leaked kernel or ledger would keep running through the rest of the suite.
    const running = report.pids.filter((pid) => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    });
    expect(running, "processes the pass left running").to.deep.equal([]);
  });

  it("the checker sees a sandbox call's live effect, a journaled sandbox Unsafe call and a lost shadow write (its sandbox counts can fail)", async function () {
    const database = freshDatabaseName("torture_check");
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "torture-check-"));
    const journal = path.join(dir, "w.jsonl");
    const lines = [
      { ev: "plan", op: "s1-0", tool: "torture.ticket", sandbox: "shadow" },
      { ev: "ack", op: "s1-0", dup: false, shadow: true },
      { ev: "plan", op: "w1-r0-0", tool: "torture.ticket", sandbox: "replay" },
    ];
    fs.writeFileSync(journal, lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
    const client = await MongoClient.connect(testMongoUri());
    try {
      const db = client.db(database);
      const payload = (op: string): Buffer => Buffer.from(JSON.stringify({ op, tool: "torture.ticket" }));
      const call = (id: string, mode: string, effect: string, args: object) => ({
        _id: id,
        tool_id: "torture.ticket",
        mode,
        effect,
        state: "completed",
        attempt: 1,
        arguments_json: JSON.stringify(args),
      });
      await db.collection("entries").insertMany([
        { _id: "req:s1-0", call_id: "c-s1-0", payload: payload("s1-0") },
        { _id: "req:w1-r0-0", call_id: "c-w1-r0-0-replay", payload: payload("w1-r0-0") },
      ] as never[]);
      await db
        .collection("calls")
        .insertMany([
          call("c-s1-0", "shadow", "queryable", { request: "s1-0" }),
          call("c-w1-r0-0-replay", "replay", "queryable", { request: "w1-r0-0" }),
          call("c-s1-1", "shadow", "unsafe", { op: "s1-1" }),
        ] as never[]);
      const r = await check(testMongoUri(), database, [journal]);
      expect([r.sandboxCalls, r.sandboxEffects, r.sandboxUnsafeJournaled, r.lostShadowWrites]).to.deep.equal([3, 2, 1, 1]);
      await db.dropDatabase();
    } finally {
      await client.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it("a pass that outlives its deadline gives up with its phase and its processes' last words, and leaves nothing running", async function () {
    this.timeout(120_000);
    const backend = testMongoBackend() === "ferretdb-pg" ? "ferretdb-pg" : "ferretdb-sqlite";
    const before = new Set(findChildPids(process.pid, ""));
    let message = "";
    try {
      await runTorture({ backend, kills: 1_000, seed: 7, deadlineMs: 8_000 });
    } catch (err) {
      message = err instanceof Error ? err.message : String(err);
    }
    expect(message).to.match(/^torture pass gave up after 8 s in phase "[^"]+"/);
    expect(message).to.match(/kernel (up \(pid \d+\)|down), ledger-a /);
    expect(message).to.include("latest worker journal:");
    const left = findChildPids(process.pid, "").filter((pid) => !before.has(pid));
    expect(left, "children the aborted pass left").to.deep.equal([]);
  });

  it("the final recovery runs on services with no fault point armed: one armed earlier is restarted unarmed, so it cannot die under the finisher", async function () {
    this.timeout(150_000);
    const backend = testMongoBackend() === "ferretdb-pg" ? "ferretdb-pg" : "ferretdb-sqlite";
    // Every start arms a fault point that fires at the first or second pass: the services
    // running when the final recovery begins are all armed.
    const report = await runTorture({ backend, kills: 4, seed: 11, loadMs: [300, 600], faultPointRate: 1, faultPointAt: [1, 3], deadlineMs: 120_000 });
    expect(report.finalRecoveryClean, "the finisher recovered everything").to.equal(true);
    expect(violations(report), JSON.stringify(report.examples)).to.deep.equal([]);
  });
});
