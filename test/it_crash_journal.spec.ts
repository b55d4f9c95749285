/**
 * Issue 15: crashes between the journal's writes leave nothing invisible to recovery.
 * The kernel is a real process, SIGKILLed by itself at a fault point
 * (KEYCAP_TEST_FAULT_POINTS), then restarted on the same database.
 */
import { expect } from "chai";
import { MongoClient } from "mongodb";
import { once } from "node:events";
import { defineTool, KernelClient } from "../clients/ts/src";
import { refusal } from "./support/refusal";
import { runCli, serviceEnv, startService, type ServiceProcess } from "./support/processes";

async function killedAtFault(proc: ServiceProcess): Promise<void> {
  if (proc.child.exitCode === null && proc.child.signalCode === null) await once(proc.child, "exit");
  expect(proc.child.signalCode).to.equal("SIGKILL");
}

/** A kernel SIGKILLed by itself at `point` inside a BeginCall of `callId` (answered UNAVAILABLE to the client). */
async function killedInBeginCall(point: string, order: string, callId: string): Promise<{ env: Record<string, string>; tool: ReturnType<typeof defineTool> }> {
  const env = serviceEnv();
  const tool = defineTool({ id: "crash.charge", effect: { kind: "idempotent", key: { fields: ["/order"] } } });
  let kernel = await startService("kernel", env);
  let client = new KernelClient(kernel.endpoints.kernel!);
  await client.registerTool(tool);
  client.close();
  await kernel.stop();
  kernel = await startService("kernel", env, { env: { KEYCAP_TEST_FAULT_POINTS: point } });
  client = new KernelClient(kernel.endpoints.kernel!);
  const e = await refusal(client.beginCall(tool.id, JSON.stringify({ order }), { callId, retry: false }));
  expect(e.codeName).to.equal("UNAVAILABLE");
  client.close();
  await killedAtFault(kernel);
  return { env, tool };
}

describe("journal: crash between writes (issue 15)", function () {
  this.timeout(120_000);

  it("a kernel killed inside BeginCall after its one journal write (ADR 0034): the call, neither copied nor completed, is listed from its unsettled second, resumed, and its second settled by the next kernel", async function () {
    const { env, tool } = await killedInBeginCall("journal.begin.after-journal", "O-1", "crash-begin-1");
    // What the crash left: the journal document and its second's mark, no pending copy.
    const mongo = await MongoClient.connect(env["MONGODB_URI"]!);
    try {
      const db = mongo.db(env["KEYCAP_MONGODB_DATABASE"]);
      expect(await db.collection<{ _id: string }>("calls").countDocuments({ _id: "crash-begin-1" })).to.equal(1);
      expect(await db.collection<{ _id: string }>("pending_calls").countDocuments({ _id: "crash-begin-1" })).to.equal(0);
      expect(await db.collection("unsettled_seconds").countDocuments({})).to.be.greaterThan(0);
    } finally {
      await mongo.close();
    }

    const kernel = await startService("kernel", env);
    const client = new KernelClient(kernel.endpoints.kernel!);
    try {
      const pending = await client.listPendingCalls(tool.id);
      expect(pending.map((c) => c.callId)).to.deep.equal(["crash-begin-1"]);
      const resumed = await client.resumeCall("crash-begin-1");
      expect(resumed.capability).to.not.equal("");
      expect(resumed.call?.attempt).to.equal(2);
      // The retry of the same BeginCall finds the same call, not a conflict.
      const again = await client.beginCall(tool.id, JSON.stringify({ order: "O-1" }), { callId: "crash-begin-1" });
      expect(again.existingCall).to.equal(true);
      expect(again.call?.key).to.equal(resumed.call?.key);
      // The dead kernel's mark is adopted (older than the settle time + 30 s): the still
      // pending call gets its pending copy, and no second stays marked.
      const mongo = await MongoClient.connect(env["MONGODB_URI"]!);
      try {
        const db = mongo.db(env["KEYCAP_MONGODB_DATABASE"]);
        const deadline = Date.now() + 90_000;
        let copies = 0;
        let marks = -1;
        while (Date.now() < deadline && (copies !== 1 || marks !== 0)) {
          await new Promise((r) => setTimeout(r, 1000));
          copies = await db.collection<{ _id: string }>("pending_calls").countDocuments({ _id: "crash-begin-1" });
          marks = await db.collection("unsettled_seconds").countDocuments({});
        }
        expect({ copies, marks }).to.deep.equal({ copies: 1, marks: 0 });
      } finally {
        await mongo.close();
      }
      expect((await client.listPendingCalls(tool.id)).map((c) => c.callId)).to.deep.equal(["crash-begin-1"]);
    } finally {
      client.close();
      await kernel.stop();
    }
  });

  it("a kernel killed inside BeginCall before its journal write: nothing is journaled or listed, and the runtime's retry of the BeginCall journals the call", async function () {
    const { env, tool } = await killedInBeginCall("journal.begin.before-journal", "O-2", "crash-begin-2");

    const kernel = await startService("kernel", env);
    const client = new KernelClient(kernel.endpoints.kernel!);
    try {
      expect(await client.listPendingCalls(tool.id)).to.deep.equal([]);
      const begun = await client.beginCall(tool.id, JSON.stringify({ order: "O-2" }), { callId: "crash-begin-2" });
      expect(begun.existingCall).to.equal(false);
      expect((await client.listPendingCalls(tool.id)).map((c) => c.callId)).to.deep.equal(["crash-begin-2"]);
    } finally {
      client.close();
      await kernel.stop();
    }
  });

  it("a crash between marking an Unsafe call indeterminate and unlisting it: the next `keycap recover` succeeds and the call waits for an operator", async function () {
    const env = serviceEnv();
    const tool = defineTool({ id: "crash.transfer", effect: { kind: "unsafe" } });
    let kernel = await startService("kernel", env);
    const client = new KernelClient(kernel.endpoints.kernel!);
    await client.registerTool(tool);
    await client.beginCall(tool.id, JSON.stringify({ amount: 5 }), { callId: "crash-unsafe-1" });
    client.close();
    await kernel.stop();

    kernel = await startService("kernel", env, { env: { KEYCAP_TEST_FAULT_POINTS: "journal.indeterminate.after-mark" } });
    const first = await runCli(["recover", "--kernel", kernel.endpoints.kernel!, "--json"], env);
    expect(first.code).to.not.equal(0); // the kernel died under it
    await killedAtFault(kernel);

    kernel = await startService("kernel", env);
    try {
      const second = await runCli(["recover", "--kernel", kernel.endpoints.kernel!, "--json"], env);
      expect(second.code, second.stdout + second.stderr).to.equal(0);
      const steps = JSON.parse(second.stdout) as { callId: string; result: string }[];
      expect(steps.filter((s) => s.result === "failed")).to.deep.equal([]);
      const pending = await runCli(["calls", "--state", "pending", "--kernel", kernel.endpoints.kernel!, "--json"], env);
      expect((JSON.parse(pending.stdout) as { callId: string }[]).map((c) => c.callId)).to.not.include("crash-unsafe-1");
      const waiting = await runCli(["calls", "--state", "indeterminate", "--kernel", kernel.endpoints.kernel!, "--json"], env);
      expect((JSON.parse(waiting.stdout) as { callId: string }[]).map((c) => c.callId)).to.include("crash-unsafe-1");
    } finally {
      await kernel.stop();
    }
  });

  it("a BeginCall repeated after the capability's lifetime gets the same capability renewed, not an expired one", async function () {
    const env = serviceEnv({ KEYCAP_CAPABILITY_TTL_SECONDS: "5" });
    const kernel = await startService("kernel", env);
    const client = new KernelClient(kernel.endpoints.kernel!);
    try {
      const tool = defineTool({ id: "late.transfer", effect: { kind: "unsafe" } });
      await client.registerTool(tool);
      const first = await client.beginCall(tool.id, "{}", { callId: "late-1" });
      const soon = await client.beginCall(tool.id, "{}", { callId: "late-1" });
      expect(soon.capability).to.equal(first.capability); // same token while it has time left
      await new Promise((r) => setTimeout(r, 5500));
      const late = await client.beginCall(tool.id, "{}", { callId: "late-1" });
      expect(late.existingCall).to.equal(true);
      expect(late.capabilityExpiresAt!.getTime()).to.be.greaterThan(Date.now());
      const jti = (t: string): unknown => (JSON.parse(Buffer.from(t.split(".")[1]!, "base64url").toString()) as { jti: unknown }).jti;
      expect(jti(late.capability)).to.equal(jti(first.capability));
    } finally {
      client.close();
      await kernel.stop();
    }
  });
});
