/**
 * Run modes at the HTTP effect gateway (issue 30, ADR 0028, 0029), on real kernel, ledger and
 * gateway processes, a real MongoDB-protocol server and a real local HTTP destination that
 * counts every request it receives: a recorded live run replayed through the gateway gets its
 * recorded answers with 0 requests out and nothing new stored; a replay that changes an
 * argument diverges; a shadow run beside a live run sends nothing and leaves its would-be
 * requests in the ledger's shadow store; an Unsafe sandbox capability is refused and recorded.
 */
import { expect } from "chai";
import { credentials, Metadata } from "@grpc/grpc-js";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { MongoClient, type Db } from "mongodb";
import { KernelClient } from "../clients/ts/src";
import { GatewayServiceClient, type ForwardRequest, type ForwardResponse } from "../gen/ts/keycap/gateway/v1/gateway";
import { refusalOf, startLedgerStack, type LedgerStack } from "./support/ledger-harness";
import { startService, type ServiceProcess } from "./support/processes";
import { refusal } from "./support/refusal";

/** A destination that performs one effect per request and counts them. */
class CountingApi {
  readonly requests: { key: string; body: string }[] = [];
  private server!: http.Server;
  port = 0;

  async start(): Promise<void> {
    this.server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const key = String(req.headers["idempotency-key"] ?? "");
        this.requests.push({ key, body: Buffer.concat(chunks).toString() });
        res.writeHead(201, { "content-type": "application/json" }).end(JSON.stringify({ id: `ch_${this.requests.length}`, key }));
      });
    });
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    this.port = (this.server.address() as AddressInfo).port;
  }

  async stop(): Promise<void> {
    await new Promise((r) => this.server.close(r));
  }
}

describe("HTTP gateway run modes (issue 30): replay and shadow forwards never call out", function () {
  this.timeout(120_000);
  const api = new CountingApi();
  let s: LedgerStack;
  let gateway: ServiceProcess;
  let client: GatewayServiceClient;
  let kernel: KernelClient;
  let mongo: MongoClient;
  let db: Db;
  const count = (collection: string): Promise<number> => db.collection(collection).countDocuments({});

  function forward(capability: string, body: unknown): Promise<ForwardResponse> {
    const md = new Metadata();
    md.set("authorization", `Bearer ${capability}`);
    const req: ForwardRequest = { method: "POST", path: "charges", headers: [], body: Buffer.from(JSON.stringify(body)) };
    return new Promise((resolve, reject) => client.forward(req, md, { deadline: Date.now() + 30_000 }, (err, res) => (err ? reject(err) : resolve(res!))));
  }

  /** The recorded live run: two charges forwarded, an Unsafe transfer, a charge never forwarded. */
  const recorded = { runId: "gw-rec", calls: [] as string[], answers: [] as (ForwardResponse | undefined)[] };
  const run = [
    { tool: "gw.charge", args: { order_id: "R-1", amount: 1200 }, forwarded: true },
    { tool: "gw.transfer", args: { to: "acct-1", amount: 5 }, forwarded: false },
    { tool: "gw.charge", args: { order_id: "R-2", amount: 300 }, forwarded: true },
    { tool: "gw.charge", args: { order_id: "R-3", amount: 1 }, forwarded: false },
  ];

  before(async function () {
    await api.start();
    s = await startLedgerStack();
    await s.kernelCalls.registerTool({
      toolId: "gw.charge",
      effectClass: { kind: { $case: "idempotent", value: { key: { fields: ["/order_id"], version: 1 } } } },
      httpDestination: { baseUrl: `http://127.0.0.1:${api.port}/api/`, methods: ["POST"], allowPrivateNetwork: true },
    });
    await s.kernelCalls.registerUnsafe("gw.transfer");
    gateway = await startService("gateway", {
      ...s.env,
      KEYCAP_KERNEL_ADDRESS: s.kernel.endpoints.kernel!,
      KEYCAP_LEDGER_ADDRESS: s.ledger.endpoints.ledger!,
      KEYCAP_GATEWAY_LISTEN: "127.0.0.1:0",
    });
    client = new GatewayServiceClient(gateway.endpoints.gateway!, credentials.createInsecure());
    kernel = new KernelClient(s.kernel.endpoints.kernel!);
    mongo = await MongoClient.connect(s.env["MONGODB_URI"]!);
    db = mongo.db(s.env["KEYCAP_MONGODB_DATABASE"]!);
    for (const c of run) {
      const begun = await kernel.beginCall(c.tool, JSON.stringify(c.args), { runId: recorded.runId });
      recorded.calls.push(begun.call!.callId);
      recorded.answers.push(c.forwarded ? await forward(begun.capability, c.args) : undefined);
    }
    expect(api.requests).to.have.length(2);
  });

  afterEach(function () {
    if (this.currentTest?.state === "failed") console.error(gateway?.output().split("\n").slice(-30).join("\n"));
  });

  after(async function () {
    client?.close();
    kernel?.close();
    await mongo?.close();
    await gateway?.stop().catch(() => gateway.stop("SIGKILL"));
    await s?.stop();
    await api.stop();
  });

  it("replays the recorded run with the same code: every forwarded call gets its recorded answer, 0 requests out, nothing new stored; the Unsafe call is denied and recorded", async function () {
    const before = { requests: api.requests.length, forwards: await count("gateway_requests"), entries: await count("entries") };
    for (const [i, c] of run.entries()) {
      const opts = { runId: "gw-rep-1", mode: "replay" as const, replayOf: recorded.runId };
      if (c.tool === "gw.transfer") {
        const denied = await refusal(kernel.beginCall(c.tool, JSON.stringify(c.args), opts));
        expect([denied.codeName, denied.reason, denied.metadata["position"]]).to.deep.equal(["PERMISSION_DENIED", "SANDBOX_UNSAFE_DENIED", String(i)]);
        continue;
      }
      const begun = await kernel.beginCall(c.tool, JSON.stringify(c.args), opts);
      expect(begun.recordedCall?.callId, `position ${i}`).to.equal(recorded.calls[i]);
      const answer = recorded.answers[i];
      if (!answer) {
        // Recorded, but never forwarded: nothing to answer from, and nothing is sent.
        const none = await refusalOf(forward(begun.capability, c.args));
        expect(none.reason).to.equal("REPLAY_NO_RECORDED_EFFECT");
        continue;
      }
      const replayed = await forward(begun.capability, c.args);
      expect([replayed.mode, replayed.replayed, replayed.shadowed, replayed.requestMismatch]).to.deep.equal(["replay", true, false, false]);
      expect([replayed.status, replayed.key, replayed.body.toString()]).to.deep.equal([answer.status, answer.key, answer.body.toString()]);
    }
    expect(api.requests.length, "0 upstream HTTP requests").to.equal(before.requests);
    expect(await count("gateway_requests")).to.equal(before.forwards);
    expect(await count("entries")).to.equal(before.entries);
    const denied = await s.admin.listRejections({ service: "kernel", toolId: "gw.transfer", reason: "SANDBOX_UNSAFE_DENIED" });
    expect(denied.rejections).to.have.length.greaterThan(0);
    const noEffect = await s.admin.listRejections({ service: "sink:gateway", toolId: "gw.charge", reason: "REPLAY_NO_RECORDED_EFFECT" });
    expect(noEffect.rejections.map((r) => r.callId)).to.have.length(1);
  });

  it("refuses REPLAY_DIVERGED when one argument changes, naming the position and the recorded call expected; nothing is sent", async function () {
    const before = api.requests.length;
    const opts = { runId: "gw-rep-2", mode: "replay" as const, replayOf: recorded.runId };
    const changed = { ...run[0]!.args, order_id: "R-1-changed" };
    const diverged = await refusal(kernel.beginCall("gw.charge", JSON.stringify(changed), opts));
    expect([diverged.codeName, diverged.reason]).to.deep.equal(["FAILED_PRECONDITION", "REPLAY_DIVERGED"]);
    expect(diverged.metadata).to.include({ position: "0", expected_call_id: recorded.calls[0], expected_tool_id: "gw.charge" });
    // A changed body under the recorded key is answered from the record, flagged, and not sent either.
    const begun = await kernel.beginCall("gw.charge", JSON.stringify(run[0]!.args), opts);
    const flagged = await forward(begun.capability, { ...run[0]!.args, amount: 999 });
    expect([flagged.mode, flagged.requestMismatch, flagged.body.toString()]).to.deep.equal(["replay", true, recorded.answers[0]!.body.toString()]);
    expect(api.requests.length).to.equal(before);
  });

  it("runs a shadow run beside a live run: the live requests exactly as without it, the shadow's would-be requests in the shadow store, nothing sent", async function () {
    const workload = [
      { order_id: "S-1", amount: 10 },
      { order_id: "S-2", amount: 20 },
    ];
    const before = { requests: api.requests.length, shadow: await count("shadow_entries") };
    const liveKeys: string[] = [];
    for (const args of workload) {
      const begun = await kernel.beginCall("gw.charge", JSON.stringify(args), { runId: "gw-live-3" });
      const live = await forward(begun.capability, args);
      expect([live.status, live.mode, live.shadowed, live.replayed]).to.deep.equal([201, "", false, false]);
      liveKeys.push(live.key);
    }
    const liveRequests = api.requests.slice(before.requests);
    expect(liveRequests.map((r) => r.key)).to.deep.equal(liveKeys);
    const forwardsAfterLive = await count("gateway_requests");
    for (const args of workload) {
      const begun = await kernel.beginCall("gw.charge", JSON.stringify(args), { runId: "gw-shadow-3", mode: "shadow", shadows: "gw-live-3" });
      const shadowed = await forward(begun.capability, args);
      expect([shadowed.status, shadowed.mode, shadowed.shadowed, shadowed.body.length]).to.deep.equal([0, "shadow", true, 0]);
      // The tool's key does not name the run, so the shadow key is the live one: the live record under it is left alone.
      expect(shadowed.key).to.equal(begun.call!.key).and.be.oneOf(liveKeys);
      // Forwarded again under the same shadow key: still one shadow effect; another request under it is flagged.
      const again = await forward(begun.capability, args);
      expect([again.shadowed, again.requestMismatch]).to.deep.equal([true, false]);
      const other = await forward(begun.capability, { ...args, amount: 999 });
      expect([other.shadowed, other.requestMismatch]).to.deep.equal([true, true]);
    }
    expect(api.requests.slice(before.requests), "the live run's requests, and only those").to.deep.equal(liveRequests);
    expect(await count("gateway_requests")).to.equal(forwardsAfterLive);
    const shadows = await db.collection<{ tool_id: string; payload: { buffer: Uint8Array } }>("shadow_entries").find({ tool_id: "gw.charge" }).toArray();
    expect(shadows.length - before.shadow).to.equal(workload.length);
    const wouldBe = shadows.map((d) => JSON.parse(Buffer.from(d.payload.buffer).toString()) as Record<string, unknown>);
    // The would-be request is the live one: same method, URL and request hash as the gateway's live record.
    const liveRecords = await db
      .collection<{ _id: string; request_sha256: string }>("gateway_requests")
      .find({ _id: { $in: liveKeys } })
      .toArray();
    expect(wouldBe.map((w) => [w["gateway"], w["method"], w["url"]])).to.deep.equal(
      workload.map(() => ["http", "POST", `http://127.0.0.1:${api.port}/api/charges`]),
    );
    expect(wouldBe.map((w) => w["request_sha256"]).sort()).to.deep.equal(liveRecords.map((r) => r.request_sha256).sort());
  });

  it("refuses an Unsafe capability of a sandbox run SANDBOX_UNSAFE_DENIED and records it against the tool, even one signed with the kernel's key", async function () {
    const minter = await s.minter();
    const before = api.requests.length;
    for (const mode of ["shadow", "replay"] as const) {
      const minted = await minter.mint({ principal: "local-runtime", toolId: "gw.transfer", effect: "unsafe", callId: `forged-${mode}`, attempt: 1, mode });
      const denied = await refusalOf(forward(minted.token, { to: "x" }));
      expect(denied.reason).to.equal("SANDBOX_UNSAFE_DENIED");
    }
    expect(api.requests.length).to.equal(before);
    const rows = await s.admin.listRejections({ service: "sink:gateway", toolId: "gw.transfer", reason: "SANDBOX_UNSAFE_DENIED" });
    expect(rows.rejections.map((r) => [r.callId, r.toolIdVerified]).sort()).to.deep.equal([
      ["forged-replay", true],
      ["forged-shadow", true],
    ]);
  });
});
