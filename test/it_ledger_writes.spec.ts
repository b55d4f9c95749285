/**
 * The ledger's Writes and the TypeScript client's coalescing of writes (ADR 0037): each write
 * of a batch is verified, decided, answered and recorded exactly as Write would answer it
 * alone; only what the whole request shares refuses a batch. Real `keycap serve all` on a
 * real MongoDB-protocol server; refusals read back through the admin API.
 */
import { Metadata, Server, ServerCredentials, status, type sendUnaryData, type ServerUnaryCall } from "@grpc/grpc-js";
import { expect } from "chai";
import { AdminClient, defineTool, KernelClient, KeycapClientError, LedgerClient } from "../clients/ts/src";
import { errorOf } from "../clients/ts/src/call-coalescer";
import { callUnary } from "../clients/ts/src/rpc";
import {
  LedgerServiceService,
  type CapabilityWrite,
  type WriteRequest,
  type WriteResponse,
  type WritesRequest,
  type WritesResponse,
} from "../gen/ts/keycap/ledger/v1/ledger";
import type { Rejection } from "../gen/ts/keycap/ledger/v1/ledger_admin";
import { eventually } from "./support/eventually";
import { scrape, sumOf } from "./support/prometheus";
import { serviceEnv, startService, TEST_RUNTIME_TOKEN, type ServiceProcess } from "./support/processes";
import { refusal } from "./support/refusal";

const ADMIN = "ledger-writes-test-admin-token-0123456789";
const charge = defineTool({
  id: "writes.charge",
  effect: { kind: "idempotent", key: { fields: ["/order"] } },
  argumentsSchema: { type: "object", properties: { order: { type: "string" } }, required: ["order"] },
});

const write = (key: string, payload: string): WriteRequest => ({ key, requestId: "", payload: Buffer.from(payload) });

describe("the ledger's Writes: each write answered on its own (ADR 0037)", function () {
  this.timeout(120_000);
  let proc: ServiceProcess;
  let admin: AdminClient;
  let kernel: KernelClient;
  let ledger: LedgerClient;

  before(async function () {
    proc = await startService("all", serviceEnv({ KEYCAP_ADMIN_TOKEN: ADMIN, KEYCAP_METRICS_LISTEN: "127.0.0.1:0" }));
    admin = new AdminClient(proc.endpoints.admin!, ADMIN);
    kernel = new KernelClient(proc.endpoints.kernel!, { ledgerAddress: proc.endpoints.ledger!, token: TEST_RUNTIME_TOKEN });
    ledger = new LedgerClient(proc.endpoints.ledger!);
    await kernel.registerTool(charge);
  });
  after(async function () {
    kernel?.close();
    ledger?.close();
    admin?.close();
    await proc?.stop();
  });

  const writes = async (items: CapabilityWrite[]): Promise<(WriteResponse | KeycapClientError)[]> =>
    (await callUnary(ledger.raw.writes, ledger.raw, { writes: items } as WritesRequest, undefined)).results.map((r) => {
      if (r.result?.$case === "written") return r.result.value;
      if (r.result?.$case === "errorStatus") return errorOf(r.result.value);
      throw new Error(`batch result with neither case: ${JSON.stringify(r)}`);
    });
  const rpcs = async (method: string): Promise<number> => sumOf(await scrape(proc.endpoints.metrics!), "keycap_rpcs_total", { service: "ledger", method });

  it("answers each item in order as Write would: written, the same key again a duplicate, another call's key refused, no capability, a forged one — refusals recorded under Write", async function () {
    const tag = `w${Date.now()}`;
    const [a, b] = await Promise.all([
      kernel.beginCall(charge.id, JSON.stringify({ order: `${tag}-a` })),
      kernel.beginCall(charge.id, JSON.stringify({ order: `${tag}-b` })),
    ]);
    const forged = `${a.capability.slice(0, -4)}AAAA`;
    const [first, again, swapped, missing, bad] = await writes([
      { capability: a.capability, write: write(a.call!.key, "one") },
      { capability: a.capability, write: write(a.call!.key, "one") },
      { capability: b.capability, write: write(a.call!.key, "two") },
      { capability: "", write: write(b.call!.key, "two") },
      { capability: forged, write: write(a.call!.key, "one") },
    ]);
    const written = first as WriteResponse;
    expect(written.entry?.callId).to.equal(a.call!.callId);
    expect(written.completesCall).to.equal(true);
    expect(written.completionReceipt?.callId).to.equal(a.call!.callId);
    // Items of one batch run side by side: which of the two same writes inserted is not fixed.
    const pair = [written, again as WriteResponse];
    expect(pair.map((w) => w.entry?.entryId)).to.satisfy((ids: string[]) => ids[0] === ids[1]);
    expect(pair.filter((w) => w.duplicate)).to.have.length(1);
    expect([(swapped as KeycapClientError).codeName, (swapped as KeycapClientError).reason]).to.deep.equal(["PERMISSION_DENIED", "KEY_MISMATCH"]);
    expect((missing as KeycapClientError).codeName).to.equal("UNAUTHENTICATED");
    expect((bad as KeycapClientError).codeName).to.equal("UNAUTHENTICATED");

    // b's capability was refused for a's key: b's own write still goes through alone.
    const bAlone = await ledger.writeWithCapability(b.capability, write(b.call!.key, "two"));
    expect([bAlone.duplicate, bAlone.entry?.callId]).to.deep.equal([false, b.call!.callId]);

    const rows = await eventually(async () => {
      const mine = (await admin.listRejections({ service: "ledger" })).filter((r: Rejection) => r.attemptedKey === a.call!.key || r.callId === b.call!.callId);
      return mine.some((r: Rejection) => r.reason === "KEY_MISMATCH") ? mine : undefined;
    });
    expect(rows.map((r: Rejection) => r.method)).to.satisfy((m: string[]) => m.every((x) => x === "Write"));
    expect(rows.find((r: Rejection) => r.reason === "KEY_MISMATCH")).to.include({ callId: b.call!.callId, toolId: charge.id });
  });

  it("refuses a batch as a whole only for what its items share: no writes, more than 256 — and records it under Writes", async function () {
    const empty = await refusal(writes([]));
    expect([empty.codeName, empty.reason]).to.deep.equal(["INVALID_ARGUMENT", "BATCH_EMPTY"]);
    const many = Array.from({ length: 257 }, (_, i) => ({ capability: "x", write: write(`k${i}`, "p") }));
    const tooMany = await refusal(writes(many));
    expect([tooMany.codeName, tooMany.reason]).to.deep.equal(["INVALID_ARGUMENT", "BATCH_TOO_LARGE"]);
    const rows = await eventually(async () => {
      const mine = (await admin.listRejections({ service: "ledger" })).filter((r: Rejection) => r.method === "Writes");
      return mine.length >= 2 ? mine : undefined;
    });
    expect(rows.map((r: Rejection) => r.reason).sort()).to.deep.equal(["BATCH_EMPTY", "BATCH_TOO_LARGE"]);
  });

  it("a client's concurrent writes travel in batches, each answered as if alone; large payloads, writes with settings of their own (every single-use write) and coalesce: false go one RPC each", async function () {
    const count = async (): Promise<{ write: number; writes: number }> => ({ write: await rpcs("Write"), writes: await rpcs("Writes") });
    const run = async (client: KernelClient, tag: string, payload: string, own?: { timeoutMs: number }): Promise<void> => {
      const handles = await Promise.all(Array.from({ length: 40 }, (_, i) => client.begin(charge.id, { order: `${tag}-${i}` })));
      const answers = await Promise.all(handles.map((h) => h.write(payload, own)));
      answers.forEach((w, i) => {
        expect(w.duplicate, `write ${i}`).to.equal(false);
        expect(w.entry?.callId).to.equal(handles[i]!.callId);
        expect(w.completesCall).to.equal(true);
      });
      // Written again (a retry after a lost answer): each is the same entry, a duplicate.
      const again = await Promise.all(handles.map((h) => h.write(payload, own)));
      again.forEach((w, i) => expect([w.duplicate, w.entry?.entryId]).to.deep.equal([true, answers[i]!.entry?.entryId]));
    };

    const start = await count();
    await run(kernel, `c${Date.now()}`, "small");
    const batched = await count();
    // 80 writes made 40 at a time in one turn: 32 + 8 per turn, two turns, no Write alone.
    expect([batched.write - start.write, batched.writes - start.writes], "[Write, Writes] RPCs for 80 writes").to.deep.equal([0, 4]);

    await run(kernel, `l${Date.now()}`, "x".repeat(16 * 1024 + 1));
    const large = await count();
    expect([large.write - batched.write, large.writes - batched.writes], "payloads above 16 KiB").to.deep.equal([80, 0]);

    await run(kernel, `s${Date.now()}`, "small", { timeoutMs: 10_000 });
    const own = await count();
    expect([own.write - large.write, own.writes - large.writes], "writes with a timeout of their own").to.deep.equal([80, 0]);

    const single = new KernelClient(proc.endpoints.kernel!, { ledgerAddress: proc.endpoints.ledger!, token: TEST_RUNTIME_TOKEN, coalesce: false });
    try {
      await run(single, `u${Date.now()}`, "small");
      const after = await count();
      expect([after.write - own.write, after.writes - own.writes], "coalesce: false").to.deep.equal([80, 0]);
    } finally {
      single.close();
    }
  });

  it("with a ledger that has no Writes (older), the client falls back to one Write per write", async function () {
    // A ledger of before ADR 0037: Write forwarded to the real one, Writes unimplemented.
    const seen = { write: 0, batch: 0 };
    const server = new Server();
    server.addService(LedgerServiceService, {
      write: (call: ServerUnaryCall<WriteRequest, WriteResponse>, cb: sendUnaryData<WriteResponse>) => {
        seen.write++;
        ledger.raw.write(call.request, call.metadata as Metadata, (e, r) => cb(e, r));
      },
      lookupRequest: (_call: unknown, cb: sendUnaryData<never>) => cb({ code: status.UNIMPLEMENTED, details: "not here" }, null),
      writes: (_call: ServerUnaryCall<WritesRequest, WritesResponse>, cb: sendUnaryData<WritesResponse>) => {
        seen.batch++;
        cb({ code: status.UNIMPLEMENTED, details: "unknown method" }, null);
      },
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
    const old = new KernelClient(proc.endpoints.kernel!, { ledgerAddress: `127.0.0.1:${port}`, token: TEST_RUNTIME_TOKEN });
    try {
      const tag = `o${Date.now()}`;
      const handles = await Promise.all(Array.from({ length: 20 }, (_, i) => old.begin(charge.id, { order: `${tag}-${i}` })));
      const answers = await Promise.all(handles.map((h) => h.write("p")));
      expect(answers.map((w) => w.entry?.callId)).to.deep.equal(handles.map((h) => h.callId));
      expect(seen.write).to.equal(20);
      expect(seen.batch, "asked once, then never again").to.equal(1);
      await Promise.all(handles.slice(0, 5).map((h) => h.write("p")));
      expect(seen.batch).to.equal(1);
    } finally {
      old.close();
      server.forceShutdown();
    }
  });
});
