/**
 * BeginCalls / CompleteCalls and the TypeScript client's coalescing (ADR 0022): a batch
 * item is answered, refused and recorded exactly as the unary RPC would answer that call
 * alone; only what all items share refuses a batch. Real `keycap serve all` on a real
 * MongoDB-protocol server; refusals read back through the admin API.
 */
import { Metadata, Server, ServerCredentials, status, type sendUnaryData, type ServerUnaryCall } from "@grpc/grpc-js";
import { expect } from "chai";
import { AdminClient, defineTool, KernelClient, KeycapClientError } from "../clients/ts/src";
import { errorOf } from "../clients/ts/src/call-coalescer";
import { callUnary } from "../clients/ts/src/rpc";
import {
  CallOutcome,
  CallState,
  KernelServiceClient,
  KernelServiceService,
  RunMode,
  type BeginCallRequest,
  type BeginCallResponse,
  type BeginCallResult,
  type CompleteCallRequest,
  type CompleteCallResponse,
  type CompleteCallResult,
} from "../gen/ts/keycap/kernel/v1/kernel";
import type { Rejection } from "../gen/ts/keycap/ledger/v1/ledger_admin";
import { scrape, sumOf } from "./support/prometheus";
import { refusal } from "./support/refusal";
import { serviceEnv, startService, TEST_RUNTIME_TOKEN, type ServiceProcess } from "./support/processes";
import { eventually } from "./support/eventually";

const ADMIN = "batch-calls-test-admin-token-0123456789";
const charge = defineTool({
  id: "batch.charge",
  effect: { kind: "idempotent", key: { fields: ["/order"] } },
  argumentsSchema: { type: "object", properties: { order: { type: "string" } }, required: ["order"] },
});

/** A batch item's answer: the response, or the error the unary RPC would have thrown. */
function itemOf<R>(r: { result?: { $case: string; value: unknown } | undefined }, okCase: string): R | KeycapClientError {
  if (r.result?.$case === okCase) return r.result.value as R;
  if (r.result?.$case === "errorStatus") return errorOf(r.result.value as Buffer);
  throw new Error(`batch result with neither case: ${JSON.stringify(r)}`);
}

describe("batched BeginCall / CompleteCall: each call answered on its own (ADR 0022)", function () {
  this.timeout(120_000);
  let proc: ServiceProcess;
  let admin: AdminClient;
  let kernel: KernelClient;
  let raw: KernelServiceClient;

  before(async function () {
    proc = await startService("all", serviceEnv({ KEYCAP_ADMIN_TOKEN: ADMIN, KEYCAP_METRICS_LISTEN: "127.0.0.1:0" }));
    admin = new AdminClient(proc.endpoints.admin!, ADMIN);
    kernel = new KernelClient(proc.endpoints.kernel!, { ledgerAddress: proc.endpoints.ledger!, token: TEST_RUNTIME_TOKEN });
    raw = kernel.raw;
    await kernel.registerTool(charge);
  });
  after(async function () {
    kernel?.close();
    admin?.close();
    await proc?.stop();
  });

  const beginCalls = (calls: BeginCallRequest[], token: string | undefined = TEST_RUNTIME_TOKEN): Promise<(BeginCallResponse | KeycapClientError)[]> =>
    callUnary(raw.beginCalls, raw, { calls, receipts: [] }, token).then((res) =>
      res.results.map((r: BeginCallResult) => itemOf<BeginCallResponse>(r, "begun")),
    );
  const completeCalls = (calls: CompleteCallRequest[]): Promise<(CompleteCallResponse | KeycapClientError)[]> =>
    callUnary(raw.completeCalls, raw, { calls }, TEST_RUNTIME_TOKEN).then((res) =>
      res.results.map((r: CompleteCallResult) => itemOf<CompleteCallResponse>(r, "completed")),
    );
  const req = (callId: string, toolId: string, args: string): BeginCallRequest => ({
    toolId,
    callId,
    runId: "",
    argumentsJson: args,
    mode: RunMode.RUN_MODE_UNSPECIFIED,
    replayOfRunId: "",
    shadowsRunId: "",
  });

  it("answers each item in order as BeginCall would: begun, unknown tool, bad arguments — each refusal recorded under BeginCall with its own ids", async function () {
    const tag = `b${Date.now()}`;
    const [ok, unknown, bad] = await beginCalls([
      req(`${tag}-ok`, charge.id, JSON.stringify({ order: `${tag}-1` })),
      req(`${tag}-unknown`, "batch.no-such-tool", "{}"),
      req(`${tag}-bad`, charge.id, JSON.stringify({ order: 7 })),
    ]);
    expect(ok).to.not.be.instanceOf(KeycapClientError);
    const begun = ok as BeginCallResponse;
    expect(begun.call?.callId).to.equal(`${tag}-ok`);
    expect(begun.call?.state).to.equal(CallState.CALL_STATE_PENDING);
    expect(begun.capability).to.match(/^[\w-]+\.[\w-]+\.[\w-]+$/);
    expect([(unknown as KeycapClientError).codeName, (unknown as KeycapClientError).reason]).to.deep.equal(["NOT_FOUND", "TOOL_NOT_FOUND"]);
    expect((bad as KeycapClientError).codeName).to.equal("INVALID_ARGUMENT");
    expect((bad as KeycapClientError).reason).to.equal("ARGUMENTS_SCHEMA_VIOLATION");

    // The same call alone afterwards finds the call the batch journaled, with the same key.
    const alone = await kernel.beginCall(charge.id, JSON.stringify({ order: `${tag}-1` }), { callId: `${tag}-ok`, timeoutMs: 10_000 });
    expect(alone.existingCall).to.equal(true);
    expect(alone.call?.key).to.equal(begun.call?.key);
    expect((await kernel.listPendingCalls(charge.id)).map((c) => c.callId)).to.include(`${tag}-ok`);

    const rows = await eventually(async () => {
      const all = await admin.listRejections({ service: "kernel" });
      const mine = all.filter((r: Rejection) => r.callId === `${tag}-unknown` || r.callId === `${tag}-bad`);
      return mine.length >= 2 ? mine : undefined;
    });
    const byCall = Object.fromEntries(rows.map((r: Rejection) => [r.callId, r]));
    expect(byCall[`${tag}-unknown`]).to.include({ method: "BeginCall", reason: "TOOL_NOT_FOUND", toolId: "batch.no-such-tool", code: "NOT_FOUND" });
    expect(byCall[`${tag}-bad`]).to.include({ method: "BeginCall", reason: "ARGUMENTS_SCHEMA_VIOLATION", toolId: charge.id });
  });

  it("CompleteCalls answers each item as CompleteCall would: completed, already completed, another outcome refused, unknown call", async function () {
    const tag = `c${Date.now()}`;
    const [a, b] = (await beginCalls([
      req(`${tag}-a`, charge.id, JSON.stringify({ order: `${tag}-a` })),
      req(`${tag}-b`, charge.id, JSON.stringify({ order: `${tag}-b` })),
    ])) as BeginCallResponse[];
    expect(a?.call?.callId).to.equal(`${tag}-a`);
    expect(b?.call?.callId).to.equal(`${tag}-b`);
    const done = (callId: string, outcome: CallOutcome = CallOutcome.CALL_OUTCOME_SUCCEEDED): CompleteCallRequest => ({ callId, outcome, outcomeDetail: "" });
    const first = await completeCalls([done(`${tag}-a`), done(`${tag}-b`, CallOutcome.CALL_OUTCOME_FAILED)]);
    expect(first.map((r) => (r as CompleteCallResponse).call?.state)).to.deep.equal([CallState.CALL_STATE_COMPLETED, CallState.CALL_STATE_COMPLETED]);
    expect(first.map((r) => (r as CompleteCallResponse).alreadyCompleted)).to.deep.equal([false, false]);

    const [same, other, unknown, noOutcome] = await completeCalls([
      done(`${tag}-a`),
      done(`${tag}-b`, CallOutcome.CALL_OUTCOME_SUCCEEDED),
      done(`${tag}-none`),
      done(`${tag}-a`, CallOutcome.CALL_OUTCOME_UNSPECIFIED),
    ]);
    expect((same as CompleteCallResponse).alreadyCompleted).to.equal(true);
    expect([(other as KeycapClientError).codeName, (other as KeycapClientError).reason]).to.deep.equal(["FAILED_PRECONDITION", "CALL_ALREADY_COMPLETED"]);
    expect((unknown as KeycapClientError).codeName).to.equal("NOT_FOUND");
    expect([(noOutcome as KeycapClientError).codeName, (noOutcome as KeycapClientError).reason]).to.deep.equal(["INVALID_ARGUMENT", "OUTCOME_REQUIRED"]);
    // The unary RPC gives the same answer for the same call.
    const alone = await refusal(kernel.completeCall(`${tag}-b`, "succeeded", "", { timeoutMs: 10_000 }));
    expect([alone.codeName, alone.reason]).to.deep.equal(["FAILED_PRECONDITION", "CALL_ALREADY_COMPLETED"]);
  });

  it("checks each item against its message's rules in proto/ (call id, run ids, outcome detail): a broken item is refused alone, as the unary RPC refuses it, and recorded", async function () {
    const tag = `r${Date.now()}`;
    const longRun = { ...req(`${tag}-run`, charge.id, JSON.stringify({ order: `${tag}-r` })), runId: "r".repeat(257) };
    const longShadow = {
      ...req(`${tag}-shadow`, charge.id, JSON.stringify({ order: `${tag}-s` })),
      mode: RunMode.RUN_MODE_SHADOW,
      shadowsRunId: "s".repeat(257),
    };
    const [badId, ok, run, shadow] = await beginCalls([
      req(`${tag} bad id`, charge.id, JSON.stringify({ order: `${tag}-x` })),
      req(`${tag}-ok`, charge.id, JSON.stringify({ order: `${tag}-ok` })),
      longRun,
      longShadow,
    ]);
    const why = (e: unknown): string[] => {
      const err = e as KeycapClientError;
      return [err.codeName, err.reason, err.metadata["field"] ?? "", err.fieldViolations.map((v) => v.field).join(",")];
    };
    expect(why(badId)).to.deep.equal(["INVALID_ARGUMENT", "INVALID_CALL_ID", "call_id", "call_id"]);
    expect((ok as BeginCallResponse).call?.callId).to.equal(`${tag}-ok`);
    expect(why(run)).to.deep.equal(["INVALID_ARGUMENT", "INVALID_RUN_ID", "run_id", "run_id"]);
    expect(why(shadow)).to.deep.equal(["INVALID_ARGUMENT", "INVALID_RUN_MODE", "shadows_run_id", "shadows_run_id"]);
    // The unary RPC answers the same items the same way (its decoding checks the rules).
    const alone = await refusal(callUnary(raw.beginCall, raw, req(`${tag} bad id`, charge.id, "{}"), TEST_RUNTIME_TOKEN));
    expect(why(alone)).to.deep.equal(why(badId));
    expect(alone.message).to.equal((badId as KeycapClientError).message);

    const detail = "d".repeat(4097);
    const [tooLong, noId, done] = await completeCalls([
      { callId: `${tag}-ok`, outcome: CallOutcome.CALL_OUTCOME_SUCCEEDED, outcomeDetail: detail },
      { callId: "", outcome: CallOutcome.CALL_OUTCOME_SUCCEEDED, outcomeDetail: "" },
      { callId: `${tag}-ok`, outcome: CallOutcome.CALL_OUTCOME_SUCCEEDED, outcomeDetail: "d".repeat(4096) },
    ]);
    expect(why(tooLong)).to.deep.equal(["INVALID_ARGUMENT", "OUTCOME_DETAIL_TOO_LONG", "outcome_detail", "outcome_detail"]);
    expect(why(noId)).to.deep.equal(["INVALID_ARGUMENT", "INVALID_CALL_ID", "call_id", "call_id"]);
    expect((done as CompleteCallResponse).call?.state).to.equal(CallState.CALL_STATE_COMPLETED);

    const rows = await eventually(async () => {
      const all = await admin.listRejections({ service: "kernel" });
      const mine = all.filter((r: Rejection) => r.callId === `${tag} bad id` || r.callId === `${tag}-run`);
      return mine.length >= 3 ? mine : undefined;
    });
    expect(rows.map((r: Rejection) => `${r.method} ${r.reason}`).sort()).to.deep.equal([
      "BeginCall INVALID_CALL_ID",
      "BeginCall INVALID_CALL_ID",
      "BeginCall INVALID_RUN_ID",
    ]);
  });

  it("refuses a batch as a whole only for what its items share: no credential, no calls, more than 256 calls", async function () {
    const unauth = await refusal(beginCalls([req("x-1", charge.id, "{}")], ""));
    expect([unauth.codeName, unauth.reason]).to.deep.equal(["UNAUTHENTICATED", "PRINCIPAL_CREDENTIAL_MISSING"]);
    const empty = await refusal(beginCalls([]));
    expect([empty.codeName, empty.reason]).to.deep.equal(["INVALID_ARGUMENT", "BATCH_EMPTY"]);
    const many = Array.from({ length: 257 }, (_, i) => req(`many-${i}`, charge.id, JSON.stringify({ order: `m${i}` })));
    const tooMany = await refusal(beginCalls(many));
    expect([tooMany.codeName, tooMany.reason]).to.deep.equal(["INVALID_ARGUMENT", "BATCH_TOO_LARGE"]);
    const tooManyCompletes = await refusal(
      callUnary(
        raw.completeCalls,
        raw,
        { calls: many.map((m) => ({ callId: m.callId, outcome: CallOutcome.CALL_OUTCOME_SUCCEEDED, outcomeDetail: "" })) },
        TEST_RUNTIME_TOKEN,
      ),
    );
    expect(tooManyCompletes.reason).to.equal("BATCH_TOO_LARGE");
    // Nothing of the refused batches was begun.
    const pending = (await kernel.listPendingCalls(charge.id)).map((c) => c.callId);
    expect(pending.filter((id) => id.startsWith("many-") || id === "x-1")).to.deep.equal([]);
  });

  it("a client's concurrent begins and completes travel in batches, each call answered as if alone; coalesce: false sends one RPC per call", async function () {
    const rpcs = async (method: string): Promise<number> => sumOf(await scrape(proc.endpoints.metrics!), "keycap_rpcs_total", { service: "kernel", method });
    const count = async (): Promise<{ begin: number; begins: number; complete: number; completes: number }> => ({
      begin: await rpcs("BeginCall"),
      begins: await rpcs("BeginCalls"),
      complete: await rpcs("CompleteCall"),
      completes: await rpcs("CompleteCalls"),
    });
    const run = async (client: KernelClient, tag: string): Promise<{ ids: string[]; refused: KeycapClientError }> => {
      const refusedCall = client.beginCall("batch.no-such-tool", "{}");
      const calls = Array.from({ length: 40 }, async (_, i) => {
        const h = await client.begin(charge.id, { order: `${tag}-${i}` });
        const done = await h.complete("succeeded");
        expect(done.call?.state).to.equal(CallState.CALL_STATE_COMPLETED);
        return h.callId;
      });
      const [refused, ids] = await Promise.all([refusal(refusedCall), Promise.all(calls)]);
      return { ids, refused };
    };

    const before = await count();
    const batched = await run(kernel, `k${Date.now()}`);
    const mid = await count();
    expect(new Set(batched.ids).size).to.equal(40);
    expect([batched.refused.codeName, batched.refused.reason]).to.deep.equal(["NOT_FOUND", "TOOL_NOT_FOUND"]);
    // The 41 begins are made in one turn of the event loop: two requests carry them all, 32
    // and 9, both sent at once (the client's batches: 32 calls at most, two in flight).
    expect([mid.begin - before.begin, mid.begins - before.begins], "[BeginCall, BeginCalls] RPCs for 41 begins").to.deep.equal([0, 2]);
    expect(mid.complete - before.complete + (mid.completes - before.completes), "RPCs for 40 completes").to.be.lessThan(40);

    const single = new KernelClient(proc.endpoints.kernel!, { ledgerAddress: proc.endpoints.ledger!, token: TEST_RUNTIME_TOKEN, coalesce: false });
    try {
      const alone = await run(single, `u${Date.now()}`);
      const after = await count();
      expect([alone.refused.codeName, alone.refused.reason]).to.deep.equal(["NOT_FOUND", "TOOL_NOT_FOUND"]);
      expect(after.begin - mid.begin).to.equal(41);
      expect(after.begins - mid.begins).to.equal(0);
      expect(after.complete - mid.complete).to.equal(40);
    } finally {
      single.close();
    }
  });

  it("with a kernel that has no batch RPCs (older), the client falls back to one RPC per call", async function () {
    // A kernel of before ADR 0022: BeginCall and CompleteCall forwarded to the real one, the batch RPCs unimplemented.
    const forward =
      <Req, Res>(m: (r: Req, md: Metadata, cb: (e: unknown, r: Res) => void) => unknown) =>
      (call: ServerUnaryCall<Req, Res>, cb: sendUnaryData<Res>): void =>
        void m.call(raw, call.request, call.metadata, (e, r) => cb(e as null, r));
    const seen = { begin: 0, batch: 0 };
    const server = new Server();
    server.addService(KernelServiceService, {
      beginCall: (call: ServerUnaryCall<BeginCallRequest, BeginCallResponse>, cb: sendUnaryData<BeginCallResponse>) => {
        seen.begin++;
        forward<BeginCallRequest, BeginCallResponse>(raw.beginCall)(call, cb);
      },
      completeCall: forward<CompleteCallRequest, CompleteCallResponse>(raw.completeCall),
      beginCalls: (_call: unknown, cb: sendUnaryData<never>) => {
        seen.batch++;
        cb({ code: status.UNIMPLEMENTED, details: "unknown method" }, null);
      },
      completeCalls: (_call: unknown, cb: sendUnaryData<never>) => cb({ code: status.UNIMPLEMENTED, details: "unknown method" }, null),
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
    const old = new KernelClient(`127.0.0.1:${port}`, { ledgerAddress: proc.endpoints.ledger!, token: TEST_RUNTIME_TOKEN });
    try {
      const tag = `o${Date.now()}`;
      const handles = await Promise.all(Array.from({ length: 20 }, (_, i) => old.begin(charge.id, { order: `${tag}-${i}` })));
      expect(new Set(handles.map((h) => h.callId)).size).to.equal(20);
      await Promise.all(handles.map((h) => h.complete("succeeded")));
      expect(seen.begin).to.equal(20);
      expect(seen.batch, "asked once, then never again").to.equal(1);
      await Promise.all(Array.from({ length: 5 }, (_, i) => old.begin(charge.id, { order: `${tag}-again-${i}` })));
      expect(seen.batch).to.equal(1);
    } finally {
      old.close();
      server.forceShutdown();
    }
  });
});
