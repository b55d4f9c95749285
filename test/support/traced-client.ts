/**
 * An agent runtime process with OpenTelemetry (the way a user's would have it): tracing
 * starts before the keycap client is loaded, then three traced tool calls run and their
 * trace ids are printed as one JSON line. Usage: node traced-client.js <kernel> <ledger>
 */
import { startTracing, stopTracing } from "../../services/common/src/tracing";

startTracing("traced-client");

async function main(): Promise<void> {
  /* eslint-disable @typescript-eslint/no-require-imports */
  const { trace } = require("@opentelemetry/api") as typeof import("@opentelemetry/api");
  const { defineTool, KernelClient, LedgerClient } = require("../../clients/ts/src") as typeof import("../../clients/ts/src");
  /* eslint-enable @typescript-eslint/no-require-imports */
  const [kernelAddress, ledgerAddress] = process.argv.slice(2) as [string, string];
  const kernel = new KernelClient(kernelAddress, { ledgerAddress });
  const ledger = new LedgerClient(ledgerAddress);
  const tracer = trace.getTracer("keycap-test");
  const tool = defineTool({ id: "traces.charge", effect: { kind: "idempotent", key: { fields: ["/order"] } } });
  await kernel.registerTool(tool);
  const traced = (name: string, fn: () => Promise<void>): Promise<string> =>
    tracer.startActiveSpan(name, async (span) => {
      try {
        await fn();
      } finally {
        span.end();
      }
      return span.spanContext().traceId;
    });
  const call = await traced("agent.tool-call", async () => {
    const h = await kernel.begin(tool.id, { order: "o1" });
    await h.write("paid");
    await h.complete("succeeded");
  });
  const refusedWrite = await traced("agent.refused-write", async () => {
    const begun = await kernel.beginCall(tool.id, JSON.stringify({ order: "o2" }));
    await ledger.writeWithCapability(begun.capability, { key: "not-the-kernels-key" }, { retry: false }).catch(() => undefined);
  });
  const refusedBegin = await traced("agent.unknown-tool", async () => {
    await kernel.begin("traces.no-such-tool", { order: "o3" }).catch(() => undefined);
  });
  kernel.close();
  ledger.close();
  await stopTracing();
  process.stdout.write(JSON.stringify({ call, refusedWrite, refusedBegin }) + "\n");
}

main().catch((err: unknown) => {
  process.stderr.write(`traced-client: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
