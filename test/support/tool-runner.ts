/**
 * A tool-runner process for crash tests: registers the acceptance tools and
 * runs one call through the TypeScript runtime (begin → handler → complete).
 *
 * Usage: node dist/test/support/tool-runner.js <kernel> <ledger> <toolId> <argumentsJson> <runId> <callId>
 */
import { KernelClient, Runtime } from "../../clients/ts/src";
import { tools } from "./acceptance-tools";

async function main(): Promise<void> {
  const [kernelAddr, ledgerAddr, toolId, argsJson, runId, callId] = process.argv.slice(2) as [string, string, string, string, string, string];
  const kernel = new KernelClient(kernelAddr, { ledgerAddress: ledgerAddr });
  const runtime = new Runtime(kernel, tools);
  await runtime.registerAll();
  const { handle, output } = await runtime.run(toolId, argsJson, { runId, callId });
  process.stdout.write(`DONE ${handle.callId} ${output}\n`);
  kernel.close();
}

main().catch((err: unknown) => {
  process.stderr.write(`tool-runner: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
