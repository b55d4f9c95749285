/**
 * Issue 12, the HTTP effect gateway: an Idempotent tool's write to a third-party API that
 * honours `Idempotency-Key` goes out once per kernel-derived key, duplicates get the stored
 * answer, a retryable failure is retried under the same key, a crash of the gateway mid-
 * request is recovered under the same key, and everything outside the tool's registered
 * destination is refused and recorded. The destination is a real local HTTP server that
 * behaves like Stripe's API: it performs the effect once per key, replays its stored answer
 * to a repeated key, and counts every request it receives per key.
 */
import { expect } from "chai";
import { credentials, Metadata, status } from "@grpc/grpc-js";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { GatewayServiceClient, type ForwardRequest, type ForwardResponse } from "../gen/ts/keycap/gateway/v1/gateway";
import type { DeepPartial } from "../gen/ts/keycap/kernel/v1/kernel";
import type { HttpDestination } from "../gen/ts/keycap/effect/v1/destination";
import { capabilityHeader, foreignKey, idempotentClaims, refusalOf, signEd25519, startLedgerStack, type LedgerStack } from "./support/ledger-harness";
import { runCli, startService, type ServiceProcess } from "./support/processes";

interface KeyLog {
  requests: number;
  effects: number;
  inFlight: number;
  maxInFlight: number;
  /** The response the server replays to a repeated key (Stripe's behaviour). */
  stored?: { status: number; body: string };
}

/** A destination API: one effect per Idempotency-Key, 409 while a key is in flight, replay after. */
class CountingApi {
  readonly keys = new Map<string, KeyLog>();
  readonly withoutKey: string[] = [];
  private server!: http.Server;
  port = 0;
  private effects = 0;
  private readonly hanging = new Set<http.ServerResponse>();
  /** Resolves when a request for `/api/slow` has arrived (and its effect was performed). */
  slowArrived!: Promise<void>;
  private arrivedSlow!: () => void;

  async start(): Promise<void> {
    this.resetSlow();
    this.server = http.createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    this.port = (this.server.address() as AddressInfo).port;
  }

  resetSlow(): void {
    this.slowArrived = new Promise((r) => (this.arrivedSlow = r));
  }

  log(key: string): KeyLog {
    let l = this.keys.get(key);
    if (!l) this.keys.set(key, (l = { requests: 0, effects: 0, inFlight: 0, maxInFlight: 0 }));
    return l;
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const url = new URL(req.url ?? "/", "http://x");
    const key = req.headers["idempotency-key"];
    if (typeof key !== "string") {
      this.withoutKey.push(url.pathname);
      res.writeHead(400).end("no key");
      return;
    }
    const l = this.log(key);
    l.requests++;
    if (l.stored) {
      res.writeHead(l.stored.status, { "content-type": "application/json", "idempotent-replayed": "true" }).end(l.stored.body);
      return;
    }
    if (l.inFlight > 0) {
      res.writeHead(409, { "content-type": "application/json" }).end('{"error":"a request with this key is in progress"}');
      return;
    }
    l.inFlight++;
    l.maxInFlight = Math.max(l.maxInFlight, l.inFlight);
    try {
      await this.respond(url, key, l, res);
    } finally {
      l.inFlight--;
    }
  }

  private async respond(url: URL, key: string, l: KeyLog, res: http.ServerResponse): Promise<void> {
    const effect = (statusCode: number, body: unknown): { status: number; body: string } => {
      l.effects++;
      this.effects++;
      l.stored = { status: statusCode, body: JSON.stringify(body) };
      return l.stored;
    };
    switch (url.pathname) {
      case "/api/charges": {
        const delay = Number(url.searchParams.get("delay") ?? 0);
        const stored = effect(201, { id: `ch_${this.effects + 1}`, key });
        if (delay) await new Promise((r) => setTimeout(r, delay));
        res.writeHead(stored.status, { "content-type": "application/json", "x-request-id": `req_${l.requests}`, "x-other": "dropped" }).end(stored.body);
        return;
      }
      case "/api/flaky":
        if (l.requests === 1) {
          res.writeHead(503).end("try again");
          return;
        }
        res.writeHead(201, { "content-type": "application/json" }).end(effect(201, { id: "ch_flaky", key }).body);
        return;
      case "/api/declined":
        res.writeHead(402, { "content-type": "application/json" }).end(effect(402, { error: "card_declined" }).body);
        return;
      case "/api/slow":
        // The effect happens now; the answer never comes (the gateway is killed waiting for it).
        effect(201, { id: "ch_slow", key });
        this.hanging.add(res);
        res.on("close", () => this.hanging.delete(res));
        this.arrivedSlow();
        return;
      case "/api/redirect-off":
        res.writeHead(307, { location: "http://attacker.invalid/steal" }).end();
        return;
      case "/api/redirect-on":
        res.writeHead(307, { location: "/api/charges" }).end();
        return;
      case "/api/big":
        res.writeHead(200, { "content-type": "text/plain" }).end("x".repeat(20_000));
        l.effects++;
        return;
      default:
        res.writeHead(404).end();
    }
  }

  async stop(): Promise<void> {
    for (const r of this.hanging) r.destroy();
    await new Promise((r) => this.server.close(r));
  }
}

function destination(api: CountingApi, overrides: Partial<HttpDestination> = {}): DeepPartial<HttpDestination> {
  return { baseUrl: `http://127.0.0.1:${api.port}/api/`, methods: ["POST"], responseHeaders: ["X-Request-Id"], allowPrivateNetwork: true, ...overrides };
}

describe("HTTP effect gateway (issue 12): one outbound effect per key for APIs that speak Idempotency-Key", function () {
  this.timeout(120_000);
  const api = new CountingApi();
  let s: LedgerStack;
  let gateway: ServiceProcess;
  let client: GatewayServiceClient;
  let orders = 0;

  const gatewayEnv = (): Record<string, string> => ({
    ...s.env,
    KEYCAP_KERNEL_ADDRESS: s.kernel.endpoints.kernel!,
    KEYCAP_GATEWAY_LISTEN: "127.0.0.1:0",
    KEYCAP_GATEWAY_TIMEOUT_MS: "1500",
    KEYCAP_GATEWAY_WAIT_MS: "8000",
    KEYCAP_GATEWAY_MAX_RESPONSE_BYTES: "4096",
  });

  async function startGateway(): Promise<void> {
    gateway = await startService("gateway", gatewayEnv());
    client?.close();
    client = new GatewayServiceClient(gateway.endpoints.gateway!, credentials.createInsecure());
  }

  /** Begins a call of `tool` for a new order: its capability and kernel-derived key. */
  async function begin(tool = "gw.charge"): Promise<{ capability: string; key: string }> {
    const r = await s.kernelCalls.beginCall(tool, { order_id: `order-${++orders}`, amount: 1200 });
    return { capability: r.capability, key: r.call!.key };
  }

  function forward(capability: string | undefined, req: Partial<ForwardRequest>, deadlineMs = 30_000): Promise<ForwardResponse> {
    const md = new Metadata();
    if (capability !== undefined) md.set("authorization", `Bearer ${capability}`);
    const full: ForwardRequest = { method: "POST", path: "charges", headers: [], body: Buffer.from('{"amount":1200}'), ...req };
    return new Promise((resolve, reject) => client.forward(full, md, { deadline: Date.now() + deadlineMs }, (err, res) => (err ? reject(err) : resolve(res!))));
  }

  before(async function () {
    await api.start();
    s = await startLedgerStack();
    await s.kernelCalls.registerTool({
      toolId: "gw.charge",
      effectClass: { kind: { $case: "idempotent", value: { key: { fields: ["/order_id"], version: 1 } } } },
      httpDestination: destination(api),
    });
    await s.kernelCalls.registerTool({
      toolId: "gw.public-only",
      effectClass: { kind: { $case: "idempotent", value: { key: { fields: ["/order_id"], version: 1 } } } },
      httpDestination: destination(api, { allowPrivateNetwork: false }),
    });
    await s.kernelCalls.registerIdempotent("gw.no-destination", ["/order_id"]);
    await startGateway();
  });

  afterEach(function () {
    // A failed forward answers INTERNAL "see the service log": show that log with the failure.
    if (this.currentTest?.state === "failed") console.error(gateway?.output().split("\n").slice(-30).join("\n"));
  });

  after(async function () {
    client?.close();
    await gateway?.stop().catch(() => gateway.stop("SIGKILL"));
    await s?.stop();
    await api.stop();
  });

  describe("registration", function () {
    it("keeps a tool's destination in its definition, normalised, and returns it from GetTool", async function () {
      const again = await s.kernelCalls.registerTool({
        toolId: "gw.charge",
        effectClass: { kind: { $case: "idempotent", value: { key: { fields: ["/order_id"], version: 1 } } } },
        httpDestination: destination(api),
      });
      expect(again.alreadyRegistered).to.equal(true);
      expect(again.tool!.httpDestination).to.deep.include({
        baseUrl: `http://127.0.0.1:${api.port}/api/`,
        methods: ["POST"],
        responseHeaders: ["content-type", "x-request-id"],
        idempotencyHeader: "Idempotency-Key",
        allowPrivateNetwork: true,
      });
    });

    it("refuses a destination on a tool that is not Idempotent, and a destination that is not a usable URL or method list", async function () {
      const unsafe = await refusalOf(
        s.kernelCalls.registerTool({ toolId: "gw.bad1", effectClass: { kind: { $case: "unsafe", value: {} } }, httpDestination: destination(api) }),
      );
      expect([unsafe.code, unsafe.reason]).to.deep.equal([status.INVALID_ARGUMENT, "HTTP_DESTINATION_NEEDS_IDEMPOTENT"]);
      const idem = { kind: { $case: "idempotent" as const, value: { key: { fields: ["/order_id"], version: 1 } } } };
      for (const bad of [
        { baseUrl: "ftp://127.0.0.1/x" },
        { baseUrl: "https://user:pw@api.example.com/" },
        { baseUrl: "https://api.example.com/?a=1" },
        { methods: ["GET"] },
        { methods: [] },
      ]) {
        const r = await refusalOf(s.kernelCalls.registerTool({ toolId: "gw.bad2", effectClass: idem, httpDestination: destination(api, bad) }));
        expect([r.code, r.reason], JSON.stringify(bad)).to.deep.equal([status.INVALID_ARGUMENT, "INVALID_HTTP_DESTINATION"]);
      }
    });
  });

  describe("one effect per key", function () {
    it("sends the request once with Idempotency-Key = the kernel-derived key, and answers a duplicate from the store without calling out", async function () {
      const { capability, key } = await begin();
      const first = await forward(capability, {});
      expect(first.status).to.equal(201);
      expect(first.key).to.equal(key);
      expect(first.replayed).to.equal(false);
      expect(first.attempts).to.equal(1);
      expect(first.headers).to.deep.equal([
        { name: "content-type", value: "application/json" },
        { name: "x-request-id", value: "req_1" },
      ]);
      expect(JSON.parse(first.body.toString())).to.deep.include({ key });
      const again = await forward(capability, {});
      expect(again.replayed).to.equal(true);
      expect(again.body.toString()).to.equal(first.body.toString());
      expect(again.status).to.equal(201);
      expect(api.keys.get(key)).to.deep.include({ requests: 1, effects: 1 });
    });

    it("(a) 100 concurrent forwards of one key: exactly one request goes out, and every caller gets its answer", async function () {
      const { capability, key } = await begin();
      const answers = await Promise.all(Array.from({ length: 100 }, () => forward(capability, { path: "charges?delay=400" })));
      expect(api.keys.get(key)).to.deep.include({ requests: 1, effects: 1 });
      expect(new Set(answers.map((a) => a.body.toString())).size).to.equal(1);
      expect(answers.every((a) => a.status === 201)).to.equal(true);
      expect(answers.filter((a) => !a.replayed)).to.have.length(1);
    });

    it("a duplicate that cannot wait for the forward in flight (its deadline comes first) is told ABORTED IN_PROGRESS, sends nothing, and a later one gets the answer", async function () {
      const { capability, key } = await begin();
      const first = forward(capability, { path: "charges?delay=1200" });
      await new Promise((r) => setTimeout(r, 200)); // the first holds the key's lease now
      const impatient = await refusalOf(forward(capability, { path: "charges?delay=1200" }, 700));
      expect([impatient.code, impatient.reason]).to.deep.equal([status.ABORTED, "IN_PROGRESS"]);
      const answered = await first;
      expect([answered.status, answered.replayed]).to.deep.equal([201, false]);
      const later = await forward(capability, { path: "charges?delay=1200" });
      expect([later.replayed, later.body.toString()]).to.deep.equal([true, answered.body.toString()]);
      expect(api.keys.get(key)).to.deep.include({ requests: 1, effects: 1 });
    });

    it("(b) a 503 leaves the key retryable (UNAVAILABLE): the retry goes out under the same key and the effect happens once", async function () {
      const { capability, key } = await begin();
      const failed = await refusalOf(forward(capability, { path: "flaky" }));
      expect([failed.code, failed.reason]).to.deep.equal([status.UNAVAILABLE, "UPSTREAM_UNAVAILABLE"]);
      const retried = await forward(capability, { path: "flaky" });
      expect([retried.status, retried.replayed, retried.attempts]).to.deep.equal([201, false, 2]);
      const duplicate = await forward(capability, { path: "flaky" });
      expect(duplicate.replayed).to.equal(true);
      // Both requests the API saw carried this key (it counts by the header): one effect.
      expect(api.keys.get(key)).to.deep.include({ requests: 2, effects: 1, maxInFlight: 1 });
    });

    it("(c) SIGKILL of the gateway mid-request, then recovery: sent again under the same key, the effect happens once", async function () {
      const { capability, key } = await begin();
      api.resetSlow();
      const lost = forward(capability, { path: "slow" }).catch((err: unknown) => err);
      await api.slowArrived;
      await gateway.stop("SIGKILL");
      await lost;
      await startGateway();
      // The record still holds the dead gateway's lease: the retry waits it out, then sends again.
      const recovered = await forward(capability, { path: "slow" });
      expect(recovered.status).to.equal(201);
      expect(recovered.attempts).to.equal(2);
      expect(JSON.parse(recovered.body.toString())).to.deep.equal({ id: "ch_slow", key });
      expect(api.keys.get(key)).to.deep.include({ requests: 2, effects: 1, maxInFlight: 1 });
      const duplicate = await forward(capability, { path: "slow" });
      expect(duplicate.replayed).to.equal(true);
      expect(api.keys.get(key)!.requests).to.equal(2);
    });

    it("stores a 4xx as final: a duplicate replays it without calling out", async function () {
      const { capability, key } = await begin();
      const declined = await forward(capability, { path: "declined" });
      expect(declined.status).to.equal(402);
      const again = await forward(capability, { path: "declined" });
      expect([again.status, again.replayed]).to.deep.equal([402, true]);
      expect(api.keys.get(key)).to.deep.include({ requests: 1, effects: 1 });
    });

    it("flags a duplicate whose request differs from the stored one, and still sends nothing", async function () {
      const { capability, key } = await begin();
      await forward(capability, {});
      const other = await forward(capability, { body: Buffer.from('{"amount":99999}') });
      expect([other.replayed, other.requestMismatch]).to.deep.equal([true, true]);
      expect(api.keys.get(key)!.requests).to.equal(1);
    });

    it("follows a 307 that stays under the destination, keeping the key", async function () {
      const { capability, key } = await begin();
      const r = await forward(capability, { path: "redirect-on" });
      expect(r.status).to.equal(201);
      expect(api.keys.get(key)).to.deep.include({ requests: 2, effects: 1 });
    });

    it("cuts a response body at the limit and says so", async function () {
      const { capability } = await begin();
      const r = await forward(capability, { path: "big" });
      expect([r.status, r.body.length, r.bodyTruncated]).to.deep.equal([200, 4096, true]);
    });
  });

  describe("refusals, each recorded against the tool", function () {
    it("refuses a URL off the destination, a method it does not allow and a header the gateway sets, before sending anything", async function () {
      const { capability, key } = await begin();
      for (const path of ["../admin", "http://attacker.invalid/x", "charges/../../admin", "charges\r\nX: y"]) {
        const r = await refusalOf(forward(capability, { path }));
        expect([r.code, r.reason], path).to.deep.equal([status.PERMISSION_DENIED, "DESTINATION_NOT_ALLOWED"]);
      }
      const method = await refusalOf(forward(capability, { method: "DELETE" }));
      expect([method.code, method.reason]).to.deep.equal([status.PERMISSION_DENIED, "METHOD_NOT_ALLOWED"]);
      for (const name of ["Idempotency-Key", "Host", "Transfer-Encoding"]) {
        const r = await refusalOf(forward(capability, { headers: [{ name, value: "x" }] }));
        expect([r.code, r.reason], name).to.deep.equal([status.INVALID_ARGUMENT, "INVALID_HEADER"]);
      }
      expect(api.keys.has(key)).to.equal(false);
    });

    it("does not follow a redirect off the destination, and replays that refusal to a duplicate", async function () {
      const { capability, key } = await begin();
      const r = await refusalOf(forward(capability, { path: "redirect-off" }));
      expect([r.code, r.reason]).to.deep.equal([status.PERMISSION_DENIED, "REDIRECT_NOT_ALLOWED"]);
      const again = await refusalOf(forward(capability, { path: "redirect-off" }));
      expect(again.reason).to.equal("REDIRECT_NOT_ALLOWED");
      expect(api.keys.get(key)!.requests).to.equal(1);
    });

    it("refuses a destination that resolves to a private or loopback address the tool does not allow (SSRF)", async function () {
      const { capability, key } = await begin("gw.public-only");
      const r = await refusalOf(forward(capability, {}));
      expect([r.code, r.reason]).to.deep.equal([status.PERMISSION_DENIED, "ADDRESS_NOT_ALLOWED"]);
      expect(api.keys.has(key)).to.equal(false);
    });

    it("refuses a tool without a destination, and capabilities the ledger would refuse, with the ledger's reasons", async function () {
      const { capability } = await begin("gw.no-destination");
      const r = await refusalOf(forward(capability, {}));
      expect([r.code, r.reason]).to.deep.equal([status.PERMISSION_DENIED, "TOOL_NOT_ACCEPTED"]);
      const missing = await refusalOf(forward(undefined, {}));
      expect([missing.code, missing.reason]).to.deep.equal([status.UNAUTHENTICATED, "CAPABILITY_MISSING"]);
      const forged = signEd25519(capabilityHeader((await s.signingKeys()).currentKid), idempotentClaims("gw.charge", "forged-key"), foreignKey());
      const bad = await refusalOf(forward(forged, {}));
      expect([bad.code, bad.reason]).to.deep.equal([status.UNAUTHENTICATED, "BAD_SIGNATURE"]);
      const ledger = await refusalOf(s.ledgerCalls.write(forged, { key: "forged-key" }));
      expect(ledger.reason).to.equal(bad.reason);
    });

    it("records every refusal in keycap's store under sink:gateway, read back with keycap rejections", async function () {
      await new Promise((r) => setTimeout(r, 1500));
      const r = await runCli(["rejections", "--service", "sink:gateway", "--json", "--limit", "200"], {
        KEYCAP_ADMIN_TOKEN: s.adminToken,
        KEYCAP_ADMIN_ADDRESS: s.ledger.endpoints.admin!,
      });
      expect(r.code, r.stderr).to.equal(0);
      const rows = JSON.parse(r.stdout) as { toolId: string; toolIdVerified: boolean; reason: string }[];
      const seen = (reason: string, tool: string): boolean => rows.some((x) => x.reason === reason && x.toolId === tool && x.toolIdVerified);
      expect(seen("DESTINATION_NOT_ALLOWED", "gw.charge")).to.equal(true);
      expect(seen("METHOD_NOT_ALLOWED", "gw.charge")).to.equal(true);
      expect(seen("INVALID_HEADER", "gw.charge")).to.equal(true);
      expect(seen("REDIRECT_NOT_ALLOWED", "gw.charge")).to.equal(true);
      expect(seen("ADDRESS_NOT_ALLOWED", "gw.public-only")).to.equal(true);
      expect(seen("TOOL_NOT_ACCEPTED", "gw.no-destination")).to.equal(true);
      expect(rows.some((x) => x.reason === "BAD_SIGNATURE" && !x.toolIdVerified && x.toolId === "gw.charge")).to.equal(true);
    });
  });
});
