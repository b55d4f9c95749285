/**
 * Issue 12, TypeScript sink SDK: a service of the user's own (here an HTTP "charges" API and
 * a gRPC service speaking the ledger's Write) admits only genuine capabilities for its tools,
 * refuses each forgery with the reason the ledger gives for the same token, spends unsafe
 * capabilities once, and its refusals are read back through `keycap rejections`.
 */
import { expect } from "chai";
import { Server, ServerCredentials, credentials, Metadata, type sendUnaryData, type ServerUnaryCall, type ServiceError } from "@grpc/grpc-js";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { LedgerServiceClient, LedgerServiceService, WriteRequest, type WriteResponse } from "../gen/ts/keycap/ledger/v1/ledger";
import { readErrorInfo } from "../clients/ts/src/status-details";
import { connectMongo, type MongoConnection } from "../services/common/src/mongo";
import { createLogger } from "../services/common/src/logger";
import type { RejectionAudit } from "../services/common/src/rejection-audit";
import {
  capabilityOf,
  InMemorySpentStore,
  KernelKeySource,
  MongoSpentStore,
  openSinkRefusalStore,
  protectHttp,
  protectService,
  Sink,
  type SinkRefusalEvent,
} from "../services/sink/src";
import {
  capabilityHeader,
  foreignKey,
  idempotentClaims,
  refusalOf,
  signEd25519,
  startLedgerStack,
  unsignedToken,
  type LedgerStack,
} from "./support/ledger-harness";
import { runCli } from "./support/processes";

const SINK = "test-payments";
const CHARGE = "sink.charge";
const TRANSFER = "sink.transfer";
const OTHER = "sink.other";

interface HttpAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Record<string, unknown>;
}

function post(port: number, headers: Record<string, string>): Promise<HttpAnswer> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: "127.0.0.1", port, method: "POST", path: "/charges", headers }, (res) => {
      let text = "";
      res.on("data", (d: Buffer) => (text += d.toString()));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: JSON.parse(text) as Record<string, unknown> }));
    });
    req.on("error", reject);
    req.end("{}");
  });
}

describe("sink SDK for TypeScript (issue 12): the guarantee where the effect happens", function () {
  this.timeout(120_000);
  let s: LedgerStack;
  let mongo: MongoConnection;
  let keys: KernelKeySource;
  let refusals: RejectionAudit;
  let spent: MongoSpentStore;
  let sink: Sink;
  let httpServer: http.Server;
  let httpPort = 0;
  let grpcServer: Server;
  let grpcClient: LedgerServiceClient;
  const events: SinkRefusalEvent[] = [];
  // What the protected handlers did: one entry per effect performed.
  const charges: { key: string; tool: string; callId: string }[] = [];

  before(async function () {
    s = await startLedgerStack();
    await s.kernelCalls.registerIdempotent(CHARGE, ["/order_id"]);
    await s.kernelCalls.registerUnsafe(TRANSFER);
    await s.kernelCalls.registerIdempotent(OTHER, ["/id"]);
    mongo = await connectMongo(s.env["MONGODB_URI"]!, s.env["KEYCAP_MONGODB_DATABASE"]!, 5000);
    keys = new KernelKeySource(s.kernel.endpoints.kernel!);
    refusals = await openSinkRefusalStore(mongo.db, SINK, createLogger("sink-test", "warn"));
    spent = await MongoSpentStore.open(mongo.db, { sweepIntervalMs: 0 });
    sink = new Sink({ name: SINK, tools: [CHARGE, TRANSFER], keys, spentStore: spent, refusals, onRefusal: (e) => events.push(e) });

    httpServer = http.createServer(
      protectHttp(sink, (req, res) => {
        const cap = capabilityOf(req);
        charges.push({ key: cap.key ?? "", tool: cap.tool_id, callId: cap.call_id });
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify({ charged: true, key: cap.key ?? null, tool: cap.tool_id, principal: cap.sub }));
      }),
    );
    await new Promise<void>((r) => httpServer.listen(0, "127.0.0.1", r));
    httpPort = (httpServer.address() as AddressInfo).port;

    grpcServer = new Server();
    grpcServer.addService(
      LedgerServiceService,
      protectService(sink, LedgerServiceService, {
        write: (call: ServerUnaryCall<WriteRequest, WriteResponse>, cb: sendUnaryData<WriteResponse>) => {
          const cap = capabilityOf(call);
          charges.push({ key: cap.key ?? "", tool: cap.tool_id, callId: cap.call_id });
          cb(null, {
            entry: undefined,
            duplicate: false,
            payloadMismatch: false,
            replayed: false,
            shadow: false,
            completesCall: false,
            completionReceipt: undefined,
          });
        },
      }),
    );
    const port = await new Promise<number>((resolve, reject) =>
      grpcServer.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
    grpcClient = new LedgerServiceClient(`127.0.0.1:${port}`, credentials.createInsecure());
  });

  after(async function () {
    grpcClient?.close();
    grpcServer?.forceShutdown();
    await new Promise((r) => httpServer?.close(r));
    keys?.close();
    await refusals?.close();
    await spent?.close();
    await mongo?.close();
    await s?.stop();
  });

  const httpWith = (capability: string, extra: Record<string, string> = {}): Promise<HttpAnswer> =>
    post(httpPort, { authorization: `Bearer ${capability}`, ...extra });
  const grpcWrite = (capability: string, key = ""): Promise<WriteResponse> =>
    new Promise((resolve, reject) => {
      const md = new Metadata();
      md.set("authorization", `Bearer ${capability}`);
      grpcClient.write(WriteRequest.fromPartial({ key, payload: Buffer.from("x") }), md, { deadline: Date.now() + 10_000 }, (err: ServiceError | null, res) =>
        err ? reject(err) : resolve(res),
      );
    });
  const grpcReason = async (capability: string): Promise<string | undefined> => {
    try {
      await grpcWrite(capability);
    } catch (err) {
      return readErrorInfo(err)?.reason;
    }
    return "ADMITTED";
  };

  it("admits a genuine capability over HTTP and gRPC and hands the handler the kernel-derived key", async function () {
    const begun = await s.kernelCalls.beginCall(CHARGE, { order_id: "O-1", amount: 5 });
    const key = begun.call!.key;
    expect(key).to.match(/^[A-Za-z0-9_-]{43}$/);
    const a = await httpWith(begun.capability, { "idempotency-key": key });
    expect(a.status).to.equal(200);
    expect(a.body).to.deep.equal({ charged: true, key, tool: CHARGE, principal: "local-runtime" });
    await grpcWrite(begun.capability, key);
    expect(charges.filter((c) => c.key === key)).to.have.length(2);
    expect(charges.at(-1)).to.deep.equal({ key, tool: CHARGE, callId: begun.call!.callId });
  });

  describe("forgeries get the ledger's own reason", function () {
    const forgeries: [string, () => Promise<string>][] = [
      [
        "tampered payload (the tool id changed after signing)",
        async () => {
          const { capability } = await s.kernelCalls.beginCall(CHARGE, { order_id: "F-1" });
          const [h, p, sig] = capability.split(".");
          const claims = JSON.parse(Buffer.from(p!, "base64url").toString()) as Record<string, unknown>;
          claims["key"] = "some-other-key";
          return `${h}.${Buffer.from(JSON.stringify(claims)).toString("base64url")}.${sig}`;
        },
      ],
      ["alg none", async () => unsignedToken(capabilityHeader((await s.signingKeys()).currentKid, "none"), idempotentClaims(CHARGE, "k"))],
      ["signed by a key the kernel never published", async () => signEd25519(capabilityHeader("attacker-kid"), idempotentClaims(CHARGE, "k"), foreignKey())],
      [
        "another key under the kernel's kid",
        async () => signEd25519(capabilityHeader((await s.signingKeys()).currentKid), idempotentClaims(CHARGE, "k"), foreignKey()),
      ],
      [
        "expired (the kernel's key, a clock an hour behind)",
        async () =>
          (
            await (
              await s.minter({ now: () => Date.now() - 3600_000 })
            ).mint({ principal: "x", toolId: CHARGE, effect: "idempotent", callId: "c", attempt: 1, key: "k" })
          ).token,
      ],
      [
        "another audience",
        async () =>
          (await (await s.minter({ audience: "elsewhere" })).mint({ principal: "x", toolId: CHARGE, effect: "idempotent", callId: "c", attempt: 1, key: "k" }))
            .token,
      ],
      ["not a JWS", () => Promise.resolve("not-a-token")],
    ];
    for (const [name, forge] of forgeries) {
      it(name, async function () {
        const token = await forge();
        const ledger = await refusalOf(s.ledgerCalls.write(token, { key: "k", payload: Buffer.from("x") }));
        expect(ledger.reason, "the ledger refuses it").to.be.a("string");
        const before = charges.length;
        const a = await httpWith(token);
        expect(a.body["reason"], "HTTP sink").to.equal(ledger.reason);
        expect(a.status).to.equal(401);
        expect(a.headers["content-type"]).to.equal("application/problem+json");
        expect(a.body).to.include({ title: ledger.reason, status: 401, retryable: false, type: `https://keycap.dev/reasons/${ledger.reason}` });
        expect(JSON.stringify(a.body)).not.to.include(token);
        expect(await grpcReason(token), "gRPC sink").to.equal(ledger.reason);
        expect(charges.length, "no effect ran").to.equal(before);
      });
    }
  });

  it("refuses a genuine capability for a tool it does not serve: TOOL_NOT_ACCEPTED", async function () {
    const { capability } = await s.kernelCalls.beginCall(OTHER, { id: "x" });
    const a = await httpWith(capability);
    expect(a.status).to.equal(403);
    expect(a.body["reason"]).to.equal("TOOL_NOT_ACCEPTED");
    expect(await grpcReason(capability)).to.equal("TOOL_NOT_ACCEPTED");
  });

  it("refuses a request whose Idempotency-Key is not the capability's: KEY_MISMATCH", async function () {
    const { capability } = await s.kernelCalls.beginCall(CHARGE, { order_id: "O-mismatch" });
    const a = await httpWith(capability, { "idempotency-key": "chosen-by-the-caller" });
    expect([a.status, a.body["reason"]]).to.deep.equal([403, "KEY_MISMATCH"]);
  });

  it("spends an unsafe capability once, even when ten presentations race (HTTP and gRPC share the store)", async function () {
    const begun = await s.kernelCalls.beginCall(TRANSFER, { to: "acct-9", amount: 10 });
    const callId = begun.call!.callId;
    const answers = await Promise.all(Array.from({ length: 10 }, () => httpWith(begun.capability)));
    expect(answers.filter((a) => a.status === 200)).to.have.length(1);
    expect(answers.filter((a) => a.body["reason"] === "CAPABILITY_REUSED")).to.have.length(9);
    expect(await grpcReason(begun.capability)).to.equal("CAPABILITY_REUSED");
    expect(charges.filter((c) => c.callId === callId)).to.have.length(1);
    const doc = await mongo.db.collection("spent_capabilities").findOne({ call_id: callId });
    expect(doc).to.include({ sink: SINK, tool_id: TRANSFER, effect: "unsafe" });
  });

  it("without a spent store admits idempotent capabilities only: EFFECT_CLASS_MISMATCH for unsafe", async function () {
    const bare = new Sink({ name: "bare", tools: [CHARGE, TRANSFER], keys });
    const begun = await s.kernelCalls.beginCall(TRANSFER, { to: "acct-1", amount: 1 });
    const err = await bare.admit(`Bearer ${begun.capability}`, { method: "test", peer: "127.0.0.1:1" }).catch((e: unknown) => e as { reason: string });
    expect(err).to.have.property("reason", "EFFECT_CLASS_MISMATCH");
    const ok = await s.kernelCalls.beginCall(CHARGE, { order_id: "O-bare" });
    expect((await bare.admit(`Bearer ${ok.capability}`, { method: "test", peer: "127.0.0.1:1" })).key).to.equal(ok.call!.key);
  });

  it("answers 503 SIGNING_KEYS_UNAVAILABLE with Retry-After when the kernel cannot be reached, and runs nothing", async function () {
    const { capability } = await s.kernelCalls.beginCall(CHARGE, { order_id: "O-down" });
    const deadKeys = new KernelKeySource("127.0.0.1:1", { retryInitialMs: 0 });
    const down = new Sink({ name: "down", tools: [CHARGE], keys: deadKeys, spentStore: new InMemorySpentStore() });
    const server = http.createServer(protectHttp(down, (_req, res) => void res.end("{}")));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    try {
      const a = await post((server.address() as AddressInfo).port, { authorization: `Bearer ${capability}` });
      expect([a.status, a.body["reason"], a.body["retryable"], a.headers["retry-after"]]).to.deep.equal([503, "SIGNING_KEYS_UNAVAILABLE", true, "1"]);
    } finally {
      deadKeys.close();
      await new Promise((r) => server.close(r));
    }
  });

  // Runs last: mocha runs nested suites after the outer tests, in order.
  describe("the refusal store", function () {
    it("reports every refusal to the hook and records it, read back with keycap rejections --service sink:<name>", async function () {
      await refusals.flush();
      const r = await runCli(["rejections", "--service", `sink:${SINK}`, "--json", "--limit", "200"], {
        KEYCAP_ADMIN_TOKEN: s.adminToken,
        KEYCAP_ADMIN_ADDRESS: s.ledger.endpoints.admin!,
      });
      expect(r.code, r.stderr).to.equal(0);
      const rows = JSON.parse(r.stdout) as {
        service: string;
        toolId: string;
        toolIdVerified: boolean;
        reason: string;
        method: string;
        count: string | number;
      }[];
      expect(rows.every((x) => x.service === `sink:${SINK}`)).to.equal(true);
      const reasons = new Set(rows.map((x) => x.reason));
      for (const reason of [
        "BAD_SIGNATURE",
        "ALGORITHM_NOT_ALLOWED",
        "UNKNOWN_KEY_ID",
        "EXPIRED",
        "WRONG_AUDIENCE",
        "CAPABILITY_MALFORMED",
        "TOOL_NOT_ACCEPTED",
        "KEY_MISMATCH",
        "CAPABILITY_REUSED",
      ]) {
        expect(reasons, reason).to.include(reason);
      }
      const notAccepted = rows.find((x) => x.reason === "TOOL_NOT_ACCEPTED" && x.method === "HTTP POST /charges");
      expect(notAccepted).to.include({ toolId: OTHER, toolIdVerified: true });
      const reused = rows.filter((x) => x.reason === "CAPABILITY_REUSED");
      expect(reused.reduce((n, x) => n + Number(x.count), 0)).to.equal(10);
      // The hook saw what the store holds (refusals of the "bare" and "down" sinks are not this sink's).
      expect(events.filter((e) => e.sink === SINK && e.error.reason === "CAPABILITY_REUSED")).to.have.length(10);
    });
  });
});
