/**
 * Completion receipts end to end (ADR 0035): the ledger answers a write whose entry completes
 * its call with a receipt, the TypeScript client forwards it with its next BeginCalls, and the
 * kernel settles that call from it without reading the entry. A receipt that does not verify
 * settles nothing and refuses nothing. Real `keycap serve all` on a real MongoDB-protocol server.
 */
import { expect } from "chai";
import { randomBytes } from "node:crypto";
import { defineTool, KernelClient } from "../clients/ts/src";
import { callUnary } from "../clients/ts/src/rpc";
import { CallState, RunMode, type BeginCallRequest } from "../gen/ts/keycap/kernel/v1/kernel";
import { scrape, sumOf } from "./support/prometheus";
import { refusal } from "./support/refusal";
import { serviceEnv, startService, TEST_RUNTIME_TOKEN, type ServiceProcess } from "./support/processes";
import { eventually } from "./support/eventually";

const charge = defineTool({
  id: "receipts.charge",
  effect: { kind: "idempotent", key: { fields: ["/order"] } },
  argumentsSchema: { type: "object", properties: { order: { type: "string" } }, required: ["order"] },
});

describe("completion receipts: the kernel settles a call without reading its entry (ADR 0035)", function () {
  this.timeout(120_000);
  let proc: ServiceProcess;
  let kernel: KernelClient;
  const receipts = async (result: string): Promise<number> => sumOf(await scrape(proc.endpoints.metrics!), "keycap_completion_receipts_total", { result });
  const item = (order: string): BeginCallRequest => ({
    toolId: charge.id,
    callId: `rc-${order}`,
    runId: "",
    argumentsJson: JSON.stringify({ order }),
    mode: RunMode.RUN_MODE_LIVE,
    replayOfRunId: "",
    shadowsRunId: "",
  });

  before(async function () {
    proc = await startService("all", serviceEnv({ KEYCAP_METRICS_LISTEN: "127.0.0.1:0" }));
    kernel = new KernelClient(proc.endpoints.kernel!, { ledgerAddress: proc.endpoints.ledger!, token: TEST_RUNTIME_TOKEN });
    await kernel.registerTool(charge);
  });
  after(async function () {
    kernel?.close();
    await proc?.stop();
  });

  it("a write that completes its call answers a receipt; the client's next BeginCalls carries it and the kernel settles the call from it", async () => {
    const settlesBefore = await receipts("settles");
    const handles = await Promise.all(Array.from({ length: 20 }, (_, i) => kernel.begin(charge.id, { order: `a${i}` })));
    const writes = await Promise.all(handles.map((h) => h.write("paid")));
    writes.forEach((w, i) => {
      expect(w.completesCall).to.equal(true);
      expect(w.completionReceipt?.callId).to.equal(handles[i]!.callId);
      expect(w.completionReceipt?.recordedAtMs).to.equal(w.entry!.recordedAt!.getTime());
      expect(w.completionReceipt?.mac).to.have.length(32);
    });
    // A duplicate write of the same call's effect completes it too, and answers a receipt again.
    const again = await handles[0]!.write("paid");
    expect([again.duplicate, again.completesCall, again.completionReceipt?.callId]).to.deep.equal([true, true, handles[0]!.callId]);
    // The next calls carry the receipts (two at once: a batch, not a unary BeginCall).
    await Promise.all([kernel.begin(charge.id, { order: "next-1" }), kernel.begin(charge.id, { order: "next-2" })]);
    const settled = await eventually(async () => ((await receipts("settles")) - settlesBefore >= 21 ? (await receipts("settles")) - settlesBefore : undefined));
    // 20 receipts and the duplicate's, all in the one BeginCalls, all naming calls still open here.
    expect(settled).to.equal(21);
    for (const h of handles) {
      const call = await eventually(async () => {
        const got = await kernel.getCall(h.callId);
        return got?.call?.state === CallState.CALL_STATE_COMPLETED ? got.call : undefined;
      });
      expect(call.outcomeDetail).to.match(/completed by its ledger write/);
    }
  });

  it("a write that does not complete its call (another call's effect) answers no receipt", async () => {
    const first = await kernel.begin(charge.id, { order: "shared" }, { callId: "rc-shared-1" });
    await first.write("paid");
    const second = await kernel.begin(charge.id, { order: "shared" }, { callId: "rc-shared-2" });
    const dup = await second.write("paid");
    expect([dup.duplicate, dup.completesCall, dup.completionReceipt]).to.deep.equal([true, false, undefined]);
  });

  it("a receipt that does not verify is counted invalid and settles nothing; the calls beside it begin as usual", async () => {
    const invalidBefore = await receipts("invalid");
    const open = await kernel.beginCall(charge.id, JSON.stringify({ order: "never-written" }), { callId: "rc-open" });
    const forged = { callId: open.call!.callId, recordedAtMs: Date.now(), mac: randomBytes(32) };
    const res = await callUnary(kernel.raw.beginCalls, kernel.raw, { calls: [item("beside-1"), item("beside-2")], receipts: [forged] }, TEST_RUNTIME_TOKEN);
    expect(res.results.map((r) => r.result?.$case)).to.deep.equal(["begun", "begun"]);
    expect((await receipts("invalid")) - invalidBefore).to.equal(1);
    // Past the settler's reading of its second: still pending, listed, never completed by the forgery.
    await new Promise((r) => setTimeout(r, 2_500));
    const got = await kernel.getCall("rc-open");
    expect(got?.call?.state).to.equal(CallState.CALL_STATE_PENDING);
    expect((await kernel.listPendingCalls(charge.id)).map((c) => c.callId)).to.include("rc-open");
  });

  it("refuses a BeginCalls with more than 1024 receipts as BATCH_TOO_LARGE, beginning none of its calls", async () => {
    const many = Array.from({ length: 1025 }, (_, i) => ({ callId: `x-${i}`, recordedAtMs: 1, mac: Buffer.alloc(32) }));
    const r = await refusal(callUnary(kernel.raw.beginCalls, kernel.raw, { calls: [item("too-many")], receipts: many }, TEST_RUNTIME_TOKEN));
    expect([r.codeName, r.reason]).to.deep.equal(["INVALID_ARGUMENT", "BATCH_TOO_LARGE"]);
    expect(await kernel.getCall("rc-too-many")).to.equal(undefined);
  });
});
