/**
 * Issue 15: the ledger's Queryable path after a crash, and Queryable effects of two tools
 * that must not collide. Real kernel and ledger processes on a real MongoDB-protocol server.
 */
import { expect } from "chai";
import { MongoClient } from "mongodb";
import { once } from "node:events";
import { status } from "@grpc/grpc-js";
import { queryableEffectId } from "../services/ledger/src/domain/write-rule";
import { AdminCalls, LedgerCalls, refusalOf, startLedgerStack, type LedgerStack } from "./support/ledger-harness";
import { freePort } from "./support/ports";
import { testMongoUri } from "./support/mongo";
import { startService } from "./support/processes";

describe("ledger: Queryable effects across crashes and tools (issue 15)", function () {
  this.timeout(120_000);
  let s: LedgerStack;
  before(async () => (s = await startLedgerStack()));
  after(async () => s?.stop());

  async function queryableCapability(toolId: string, requestId: string, callId: string): Promise<string> {
    const minter = await s.minter();
    return (await minter.mint({ principal: "local-runtime", toolId, effect: "queryable", callId, attempt: 1, requestId })).token;
  }

  it("keeps the request ids of two tools apart, even when the tool ids contain ':'", async function () {
    expect(queryableEffectId("X.bank", "transfer:R1")).to.not.equal(queryableEffectId("X.bank:transfer", "R1"));
    const a = await s.ledgerCalls.write(await queryableCapability("X.bank", "transfer:R1", "c-a"), { requestId: "transfer:R1", payload: Buffer.from("a") });
    const b = await s.ledgerCalls.write(await queryableCapability("X.bank:transfer", "R1", "c-b"), { requestId: "R1", payload: Buffer.from("b") });
    expect([a.duplicate, b.duplicate]).to.deep.equal([false, false]);
    expect(b.entry?.entryId).to.not.equal(a.entry?.entryId);
    expect(b.entry?.toolId).to.equal("X.bank:transfer");
  });

  it("after a ledger crash between spending a Queryable capability and its insert, the same capability finishes the write, once", async function () {
    const env = { ...s.ledger.env, KEYCAP_KERNEL_ADDRESS: s.kernel.endpoints.kernel! };
    const faulty = await startService("ledger", env, { env: { KEYCAP_TEST_FAULT_POINTS: "ledger.write.after-spend" } });
    const token = await queryableCapability("crash.notify", "N-1", "c-n1");
    const dying = new LedgerCalls(faulty.endpoints.ledger!);
    const first = await refusalOf(dying.write(token, { requestId: "N-1", payload: Buffer.from("n") }));
    expect(first.code).to.equal(status.UNAVAILABLE);
    dying.close();
    if (faulty.child.exitCode === null && faulty.child.signalCode === null) await once(faulty.child, "exit");

    const again = await startService("ledger", env);
    const calls = new LedgerCalls(again.endpoints.ledger!);
    try {
      const finished = await calls.write(token, { requestId: "N-1", payload: Buffer.from("n") });
      expect(finished.duplicate).to.equal(false);
      const replay = await refusalOf(calls.write(token, { requestId: "N-1", payload: Buffer.from("n") }));
      expect([replay.code, replay.reason]).to.deep.equal([status.PERMISSION_DENIED, "CAPABILITY_REUSED"]);
    } finally {
      calls.close();
      await again.stop();
    }
  });

  it("finds a Queryable effect an older ledger recorded under the ambiguous id, as that effect", async function () {
    const db = s.ledger.env["KEYCAP_MONGODB_DATABASE"]!;
    const client = await MongoClient.connect(testMongoUri());
    try {
      await client
        .db(db)
        .collection("entries")
        .insertOne({
          _id: "req:legacy.notify:L-1" as never,
          entry_id: "e_legacy_1",
          tool_id: "legacy.notify",
          effect: "queryable",
          call_id: "c-legacy",
          attempt: 1,
          capability_id: "jti-legacy",
          key: "",
          request_id: "L-1",
          payload: Buffer.from("old"),
          payload_sha256: "0".repeat(64),
          recorded_at: new Date(),
          payload_mismatch: false,
        });
    } finally {
      await client.close();
    }
    const env = { ...s.ledger.env, KEYCAP_KERNEL_ADDRESS: s.kernel.endpoints.kernel! };
    const upgraded = await startService("ledger", env);
    const calls = new LedgerCalls(upgraded.endpoints.ledger!);
    try {
      const lookedUp = await calls.lookup(await queryableCapability("legacy.notify", "L-1", "c-l0"), "L-1");
      expect(lookedUp.entry?.entryId).to.equal("e_legacy_1");
      const w = await calls.write(await queryableCapability("legacy.notify", "L-1", "c-l1"), { requestId: "L-1", payload: Buffer.from("old") });
      expect(w.duplicate).to.equal(true);
      expect(w.entry?.entryId).to.equal("e_legacy_1");
    } finally {
      calls.close();
      await upgraded.stop();
    }
  });

  it("counts refusals caused by keycap's own unavailability into one summary instead of storing each against the tool", async function () {
    const env = { ...s.ledger.env, KEYCAP_KERNEL_ADDRESS: `127.0.0.1:${await freePort()}` }; // no kernel there
    const alone = await startService("ledger", env);
    const calls = new LedgerCalls(alone.endpoints.ledger!);
    const admin = new AdminCalls(alone.endpoints.admin!, `Bearer ${s.adminToken}`);
    try {
      const tool = "unavailable.tool";
      for (let i = 0; i < 3; i++) {
        const token = await queryableCapability(tool, `U-${i}`, `c-u${i}`);
        const r = await refusalOf(calls.write(token, { requestId: `U-${i}`, payload: Buffer.from("u") }));
        expect([r.code, r.reason]).to.deep.equal([status.UNAVAILABLE, "SIGNING_KEYS_UNAVAILABLE"]);
      }
      const deadline = Date.now() + 10_000;
      // Summaries are written about once a second (and a minute boundary may split them).
      let summaries: { count: number; code: string }[] = [];
      const total = (): number => summaries.reduce((n, r) => n + r.count, 0);
      while (total() < 3 && Date.now() < deadline) {
        summaries = (await admin.listRejections({ reason: "UNAVAILABLE_REFUSALS" })).rejections;
        if (total() < 3) await new Promise((r) => setTimeout(r, 200));
      }
      expect(total()).to.equal(3);
      expect(summaries.every((r) => r.code === "UNAVAILABLE")).to.equal(true);
      expect((await admin.listRejections({ toolId: tool })).rejections).to.have.length(0);
    } finally {
      calls.close();
      admin.close();
      await alone.stop();
    }
  });
});
