/**
 * Issue 13, item 1: each process serves Prometheus metrics on KEYCAP_METRICS_LISTEN. A
 * scripted workload against a real `keycap serve all` is scraped and every counter it
 * moved is checked exactly; a flood of refusals under made-up tool ids leaves the number
 * of series bounded.
 */
import { expect } from "chai";
import * as crypto from "node:crypto";
import { defineTool, KernelClient, LedgerClient } from "../clients/ts/src";
import { refusal } from "./support/refusal";
import { runCli, serviceEnv, startService, type ServiceProcess } from "./support/processes";
import { scrape, sumOf, valueOf, type Sample } from "./support/prometheus";
import { createTestPki } from "./support/tls-certs";
import * as fs from "node:fs";
import * as https from "node:https";
import * as os from "node:os";
import * as path from "node:path";

const charge = defineTool({ id: "metrics.charge", effect: { kind: "idempotent", key: { fields: ["/order"] } } });

/** A compact JWS that fails before any key lookup (alg none), naming `toolId` in its unverified payload. */
function forgedCapability(toolId: string): string {
  const part = (o: object): string => Buffer.from(JSON.stringify(o)).toString("base64url");
  return `${part({ alg: "none", typ: "keycap-cap+jwt", kid: "k" })}.${part({ tool_id: toolId })}.c2ln`;
}

async function until(what: string, read: () => Promise<boolean>, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await read())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("Prometheus metrics (issue 13)", function () {
  this.timeout(120_000);
  let svc: ServiceProcess;
  let kernel: KernelClient;
  let ledger: LedgerClient;
  let metrics: string;

  before(async function () {
    svc = await startService("all", serviceEnv({ KEYCAP_METRICS_LISTEN: "127.0.0.1:0", KEYCAP_METRICS_TOOL_LABELS: "5" }));
    metrics = svc.endpoints.metrics!;
    // One RPC per call, so the RPC counts below are the calls (batches: it_batch_calls).
    kernel = new KernelClient(svc.endpoints.kernel!, { ledgerAddress: svc.endpoints.ledger!, coalesce: false });
    ledger = new LedgerClient(svc.endpoints.ledger!);
  });

  after(async function () {
    kernel?.close();
    ledger?.close();
    await svc?.stop();
  });

  it("announces the metrics address with the endpoints, and serves nothing but GET /metrics there", async function () {
    expect(metrics).to.match(/^127\.0\.0\.1:\d+$/);
    // The banner is on stderr, a pipe of its own: it may be read a moment after the ready line.
    await until("the banner", async () => svc.output().includes(`metrics http://${metrics}/metrics`));
    // The banner ends with what to run next (issue 33 item 10).
    expect(svc.output()).to.include("next: node dist/clients/ts/examples/charge.js");
    expect((await fetch(`http://${metrics}/other`)).status).to.equal(404);
  });

  it("stops the start with one line naming KEYCAP_METRICS_LISTEN when its address is taken", async function () {
    const r = await runCli(["serve", "all"], serviceEnv({ KEYCAP_METRICS_LISTEN: metrics }));
    expect(r.code).to.equal(2);
    expect(r.stderr.trim()).to.equal(`keycap: KEYCAP_METRICS_LISTEN: ${metrics} is already in use (set KEYCAP_METRICS_LISTEN to a free address)`);
  });

  it("counts a scripted workload exactly: RPCs by code, writes by outcome, refusals by service, reason and tool, verifications, pending calls", async function () {
    await kernel.registerTool(charge);
    const calls = await Promise.all(["o1", "o2", "o3"].map((order) => kernel.begin(charge.id, { order })));
    for (const c of calls) await c.write(`paid ${c.callId}`);
    const first = calls[0]!;
    const second = calls[1]!;
    await first.write(`paid ${first.callId}`); // duplicate, same payload
    await second.write("something else"); // duplicate, other payload

    // Three ledger refusal reasons and one of the kernel's.
    const mismatch = await kernel.beginCall(charge.id, JSON.stringify({ order: "o4" }));
    expect((await refusal(ledger.writeWithCapability(mismatch.capability, { key: "not-the-kernels-key" }, { retry: false }))).reason).to.equal("KEY_MISMATCH");
    for (let i = 0; i < 2; i++)
      expect((await refusal(ledger.writeWithCapability(undefined, { key: "k" }, { retry: false }))).reason).to.equal("CAPABILITY_MISSING");
    expect((await refusal(ledger.writeWithCapability("Bearer", { key: "k" }, { retry: false }))).reason).to.equal("CAPABILITY_MALFORMED");
    expect((await refusal(kernel.begin("metrics.no-such-tool", { order: "x" }))).reason).to.equal("TOOL_NOT_FOUND");

    for (const c of calls) await c.complete("succeeded");

    // The kernel settles the written calls from their entries in the background: wait for that.
    let s: Sample[] = [];
    await until("one pending call (o4)", async () => valueOf((s = await scrape(metrics)), "keycap_calls_pending") === 1);

    const writes = (outcome: string): number => valueOf(s, "keycap_ledger_writes_total", { tool: charge.id, outcome });
    expect([writes("new"), writes("duplicate"), writes("payload_mismatch")]).to.deep.equal([3, 1, 1]);

    const refusals = (service: string, reason: string, tool: string): number => valueOf(s, "keycap_refusals_total", { service, reason, tool });
    expect(refusals("ledger", "KEY_MISMATCH", charge.id)).to.equal(1);
    expect(refusals("ledger", "CAPABILITY_MISSING", "")).to.equal(2);
    expect(refusals("ledger", "CAPABILITY_MALFORMED", "")).to.equal(1);
    expect(refusals("kernel", "TOOL_NOT_FOUND", "metrics.no-such-tool")).to.equal(1);
    expect(sumOf(s, "keycap_refusals_total")).to.equal(5);

    const rpcs = (service: string, method: string, code: string): number => valueOf(s, "keycap_rpcs_total", { service, method, code });
    expect(rpcs("ledger", "Write", "OK")).to.equal(5);
    expect(rpcs("ledger", "Write", "UNAUTHENTICATED")).to.equal(3);
    expect(rpcs("ledger", "Write", "PERMISSION_DENIED")).to.equal(1);
    expect(rpcs("kernel", "BeginCall", "OK")).to.equal(4);
    expect(rpcs("kernel", "BeginCall", "NOT_FOUND")).to.equal(1);
    // Each write's entry completed its call (ADR 0034): the handles sent no CompleteCall.
    expect(rpcs("kernel", "CompleteCall", "OK")).to.equal(0);
    expect(rpcs("kernel", "RegisterTool", "OK")).to.equal(1);
    // The latency histogram counts the same calls.
    expect(valueOf(s, "keycap_rpc_duration_seconds_count", { service: "ledger", method: "Write", code: "OK" })).to.equal(5);
    expect(valueOf(s, "keycap_rpc_duration_seconds_bucket", { service: "ledger", method: "Write", code: "OK", le: "+Inf" })).to.equal(5);

    // Six capabilities verified (five writes and the key mismatch); three refused.
    expect(valueOf(s, "keycap_capability_verifications_total", { outcome: "verified" })).to.equal(6);
    expect(valueOf(s, "keycap_capability_verifications_total", { outcome: "refused" })).to.equal(3);
    expect(valueOf(s, "keycap_capability_verification_duration_seconds_count", { outcome: "verified" })).to.equal(6);

    expect(valueOf(s, "keycap_calls_indeterminate")).to.equal(0);
    // MongoDB round trips of both services, as the driver saw them; and the process itself.
    expect(sumOf(s, "keycap_mongodb_command_duration_seconds_count", { service: "ledger", command: "insert", outcome: "ok" })).to.be.greaterThanOrEqual(3);
    expect(sumOf(s, "keycap_mongodb_command_duration_seconds_count", { service: "kernel", outcome: "ok" })).to.be.greaterThan(0);
    expect(valueOf(s, "process_cpu_seconds_total")).to.be.greaterThan(0);
    expect(valueOf(s, "nodejs_eventloop_lag_seconds")).to.be.greaterThanOrEqual(0);
  });

  it("keeps the series count bounded under 10,000 refusals with random tool ids, while a tool refused often keeps its own label", async function () {
    const before = (await scrape(metrics)).length;
    // A real, frequent offender: it must keep its label through the flood.
    for (let i = 0; i < 20; i++) await refusal(ledger.writeWithCapability(forgedCapability("metrics.offender"), { key: "k" }, { retry: false }));
    const ids = Array.from({ length: 10_000 }, () => `made-up-${crypto.randomBytes(6).toString("hex")}`);
    for (let i = 0; i < ids.length; i += 100) {
      await Promise.all(ids.slice(i, i + 100).map((id) => refusal(ledger.writeWithCapability(forgedCapability(id), { key: "k" }, { retry: false }))));
    }
    const s = await scrape(metrics);
    const series = s.filter((x) => x.name === "keycap_refusals_total");
    const tools = new Set(series.map((x) => x.labels["tool"]));
    // KEYCAP_METRICS_TOOL_LABELS=5: at most five tools of its own, "other", and "" (no tool id).
    expect(tools.size).to.be.at.most(7);
    expect(tools).to.include("other");
    expect(valueOf(s, "keycap_refusals_total", { service: "ledger", reason: "ALGORITHM_NOT_ALLOWED", tool: "metrics.offender" })).to.equal(20);
    expect(sumOf(s, "keycap_refusals_total", { reason: "ALGORITHM_NOT_ALLOWED" })).to.equal(10_020);
    // The whole exposition grew by a handful of series, not by thousands.
    expect(s.length - before).to.be.lessThan(60);
  });
});

describe("the metrics listener follows the loopback-or-TLS rule (issue 32)", function () {
  this.timeout(120_000);

  it("refuses plaintext off loopback at start, naming KEYCAP_METRICS_LISTEN", async function () {
    const r = await runCli(["serve", "ledger"], serviceEnv({ KEYCAP_METRICS_LISTEN: "0.0.0.0:0" }));
    expect(r.code).to.equal(2);
    expect(r.stderr.trim().split("\n")).to.have.length(1);
    expect(r.stderr).to.contain("KEYCAP_METRICS_LISTEN").and.contain("KEYCAP_ALLOW_PLAINTEXT");
  });

  it("serves /metrics over HTTPS off loopback with the listener certificate", async function () {
    const pki = createTestPki(fs.mkdtempSync(path.join(os.tmpdir(), "keycap-metrics-pki-")));
    const svc = await startService(
      "ledger",
      serviceEnv({
        KEYCAP_METRICS_LISTEN: "0.0.0.0:0",
        KEYCAP_METRICS_TLS_CERT_FILE: pki.server.cert,
        KEYCAP_METRICS_TLS_KEY_FILE: pki.server.key,
      }),
    );
    try {
      const port = svc.endpoints.metrics!.split(":").pop()!;
      const body = await new Promise<string>((resolve, reject) => {
        https
          .get({ host: "127.0.0.1", port, path: "/metrics", ca: fs.readFileSync(pki.ca.cert) }, (res) => {
            let text = "";
            res.on("data", (d: Buffer) => (text += d.toString()));
            res.on("end", () => resolve(`${res.statusCode} ${text}`));
          })
          .on("error", reject);
      });
      expect(body).to.match(/^200 /);
      expect(body).to.include("keycap_rpcs_total");
      await until("the banner", async () => svc.output().includes(`https://${svc.endpoints.metrics}/metrics`));
    } finally {
      await svc.stop();
    }
  });
});
