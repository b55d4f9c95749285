/**
 * Issue 28, item 4: with OTEL_TRACES_EXPORTER set, one trace runs from the host's tools/call
 * (its W3C trace context in `_meta`) through the gateway's span and the kernel's BeginCall to
 * the upstream, which receives the trace context in the forwarded request's `_meta`.
 */
import { expect } from "chai";
import { randomBytes } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { readEvents } from "./support/counting-mcp-server";
import { connectHost, countingPolicy, writePolicy, type McpHost } from "./support/mcp-host";
import { startOtlpReceiver, otlpEnv, type OtlpReceiver, type ReceivedSpan } from "./support/otlp-receiver";
import { serviceEnv, startService, TEST_RUNTIME_TOKEN, type ServiceProcess } from "./support/processes";

const SERVER = 2;

describe("MCP gateway traces (issue 28)", function () {
  this.timeout(60_000);
  let kernel: ServiceProcess;
  let env: Record<string, string>;
  let receiver: OtlpReceiver;
  let dir: string;
  let host: McpHost | undefined;

  before(async function () {
    receiver = await startOtlpReceiver();
    env = serviceEnv(otlpEnv(receiver));
    kernel = await startService("kernel", env);
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-mcp-traces-"));
  });

  after(async function () {
    await host?.close().catch(() => undefined);
    await kernel?.stop();
    await receiver?.close();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it("continues the host's trace: the gateway's span, the kernel's BeginCall under it, and the trace context sent on to the upstream", async function () {
    const stateFile = path.join(dir, "effects.jsonl");
    const policy = writePolicy(dir, "policy.yaml", countingPolicy(stateFile, "      create_order: { class: idempotent, key: [/order_id] }", "traced"));
    host = await connectHost(policy, { ...env, KEYCAP_KERNEL_ADDRESS: kernel.endpoints.kernel!, KEYCAP_RUNTIME_TOKEN: TEST_RUNTIME_TOKEN });
    const traceId = randomBytes(16).toString("hex");
    const hostSpan = randomBytes(8).toString("hex");
    const result = (await host.client.callTool({
      name: "create_order",
      arguments: { order_id: "o-traced", amount: 1 },
      _meta: { traceparent: `00-${traceId}-${hostSpan}-01` },
    })) as CallToolResult;
    expect(result.isError).to.not.equal(true);

    let spans: ReceivedSpan[] = [];
    for (const end = Date.now() + 15_000; Date.now() < end; await new Promise((r) => setTimeout(r, 100))) {
      spans = receiver.spans.filter((x) => x.traceId === traceId);
      if (spans.some((x) => x.name === "mcp tools/call") && spans.some((x) => x.kind === SERVER && x.name.includes("BeginCall"))) break;
    }
    const gateway = spans.find((x) => x.name === "mcp tools/call");
    expect(gateway, JSON.stringify(spans.map((x) => x.name))).to.not.equal(undefined);
    expect(gateway!.kind).to.equal(SERVER);
    expect(gateway!.parentSpanId).to.equal(hostSpan);
    expect(gateway!.attributes).to.deep.include({ "keycap.tool_id": "mcp:traced/create_order", "keycap.outcome": "sent" });
    const byId = new Map(spans.map((x) => [x.spanId, x]));
    const underGateway = (x: ReceivedSpan): boolean => {
      for (let p = byId.get(x.parentSpanId); p; p = byId.get(p.parentSpanId)) if (p === gateway) return true;
      return false;
    };
    const begin = spans.find((x) => x.kind === SERVER && x.name.includes("BeginCall"));
    expect(begin, "the kernel's BeginCall in the same trace").to.not.equal(undefined);
    expect(underGateway(begin!)).to.equal(true);
    const sent = readEvents(stateFile).find((e) => e.event === "request" && e.args["order_id"] === "o-traced");
    expect(String(sent?.meta["traceparent"])).to.match(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
  });
});
