/**
 * Issue 13, item 2: with OTEL_TRACES_EXPORTER set, one trace runs from a TypeScript
 * client's span through the kernel and the ledger to their MongoDB operations; refusals
 * carry their reason on the span; the services' log records carry the trace id. Spans are
 * exported over OTLP/HTTP to a real receiver in this test.
 */
import { expect } from "chai";
import { spawn } from "node:child_process";
import * as path from "node:path";
import { startOtlpReceiver, otlpEnv, type OtlpReceiver, type ReceivedSpan } from "./support/otlp-receiver";
import { serviceEnv, startService, type ServiceProcess } from "./support/processes";

/** A MongoDB operation's span (older and newer semantic conventions name the system differently). */
const isMongo = (x: ReceivedSpan): boolean => x.attributes["db.system"] === "mongodb" || x.attributes["db.system.name"] === "mongodb";

const SERVER = 2;
const CLIENT = 3;

function runTracedClient(env: Record<string, string>, kernel: string, ledger: string): Promise<{ call: string; refusedWrite: string; refusedBegin: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(__dirname, "support", "traced-client.js"), kernel, ledger], {
      env: { PATH: process.env["PATH"] ?? "", KEYCAP_RUNTIME_TOKEN: process.env["KEYCAP_RUNTIME_TOKEN"] ?? "", ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    child.once("exit", (code) =>
      code === 0 ? resolve(JSON.parse(out.trim().split("\n").pop() ?? "{}")) : reject(new Error(`traced client exited ${code}: ${err}`)),
    );
  });
}

async function spansOf(receiver: OtlpReceiver, traceId: string, ready: (s: ReceivedSpan[]) => boolean): Promise<ReceivedSpan[]> {
  const end = Date.now() + 15_000;
  for (;;) {
    const s = receiver.spans.filter((x) => x.traceId === traceId);
    if (ready(s) || Date.now() > end) return s;
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("OpenTelemetry traces (issue 13)", function () {
  this.timeout(120_000);
  let receiver: OtlpReceiver;
  let svc: ServiceProcess;
  let ids: { call: string; refusedWrite: string; refusedBegin: string };

  before(async function () {
    receiver = await startOtlpReceiver();
    svc = await startService("all", serviceEnv({ ...otlpEnv(receiver), KEYCAP_LOG_LEVEL: "debug" }));
    ids = await runTracedClient(otlpEnv(receiver), svc.endpoints.kernel!, svc.endpoints.ledger!);
  });

  after(async function () {
    await svc?.stop();
    await receiver?.close();
  });

  it("shows one trace from the client's span through BeginCall and Write in kernel and ledger (the entry completes the call: no CompleteCall, ADR 0034), with their MongoDB operations", async function () {
    const named = (s: ReceivedSpan[], kind: number, method: string): ReceivedSpan | undefined => s.find((x) => x.kind === kind && x.name.endsWith(method));
    const s = await spansOf(
      receiver,
      ids.call,
      (s) => ["KernelService/BeginCall", "LedgerService/Write"].every((m) => named(s, SERVER, m)) && s.filter(isMongo).length >= 2,
    );
    const root = s.find((x) => x.name === "agent.tool-call");
    expect(root, "the client's own span").to.not.equal(undefined);
    expect(root!.service).to.equal("traced-client");
    expect(
      s.filter((x) => x.name.endsWith("KernelService/CompleteCall")),
      "two hops: no CompleteCall",
    ).to.deep.equal([]);
    for (const m of ["KernelService/BeginCall", "LedgerService/Write"]) {
      const client = named(s, CLIENT, m);
      const server = named(s, SERVER, m);
      expect(client, `client span of ${m}`).to.not.equal(undefined);
      expect(server, `server span of ${m}`).to.not.equal(undefined);
      expect(client!.service).to.equal("traced-client");
      expect(server!.service).to.equal("keycap");
      // traceparent carried the client span's id: the server span is its child.
      expect(server!.parentSpanId).to.equal(client!.spanId);
      expect(client!.parentSpanId).to.equal(root!.spanId);
    }
    // Database operations under the kernel's and the ledger's server spans.
    const serverIds = new Set(s.filter((x) => x.kind === SERVER).map((x) => x.spanId));
    const mongo = s.filter(isMongo);
    const under = (method: string): ReceivedSpan[] => mongo.filter((x) => x.parentSpanId === named(s, SERVER, method)!.spanId);
    expect(under("KernelService/BeginCall").length, "MongoDB spans under BeginCall").to.be.greaterThan(0);
    expect(under("LedgerService/Write").map((x) => x.name)).to.include("insert entries");
    expect(mongo.every((x) => serverIds.has(x.parentSpanId))).to.equal(true);
  });

  it("puts a refusal's reason on the refused call's server span", async function () {
    const s = await spansOf(receiver, ids.refusedWrite, (s) => s.some((x) => x.kind === SERVER && x.name.endsWith("LedgerService/Write")));
    const write = s.find((x) => x.kind === SERVER && x.name.endsWith("LedgerService/Write"));
    expect(write?.attributes["keycap.refusal.reason"]).to.equal("KEY_MISMATCH");
    const b = await spansOf(receiver, ids.refusedBegin, (s) => s.some((x) => x.kind === SERVER && x.name.endsWith("KernelService/BeginCall")));
    expect(b.find((x) => x.kind === SERVER && x.name.endsWith("KernelService/BeginCall"))?.attributes["keycap.refusal.reason"]).to.equal("TOOL_NOT_FOUND");
  });

  it("writes the trace id and span id into the services' log records of a traced call", function () {
    const records = svc
      .output()
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as { msg?: string; trace_id?: string; span_id?: string; reason?: string });
    const refused = records.find((r) => r.msg === "refused" && r.reason === "TOOL_NOT_FOUND");
    expect(refused?.trace_id).to.equal(ids.refusedBegin);
    expect(refused?.span_id).to.match(/^[0-9a-f]{16}$/);
    // Outside any call nothing is stamped.
    expect(records.find((r) => r.msg === "ready")).to.not.have.property("trace_id");
  });
});
