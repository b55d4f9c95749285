#!/usr/bin/env node
// A TypeScript agent runtime, for the cross-language test: registers an
// Idempotent tool and begins one call with the compiled TS client, then prints
// {"capability","key","call_id"} as one JSON line for a Python tool to write with.
//
// Usage (from the repo root, after `npx tsc -p .`):
//   node clients/python/tests/ts_runtime_begin.cjs <kernel address> <tool id> <arguments json>
"use strict";
const path = require("node:path");

const root = path.resolve(__dirname, "../../..");
const { KernelClient, defineTool } = require(path.join(root, "dist/clients/ts/src/index.js"));

async function main() {
  const [kernelAddress, toolId, argsJson] = process.argv.slice(2);
  if (!kernelAddress || !toolId || !argsJson) {
    throw new Error("usage: ts_runtime_begin.cjs <kernel address> <tool id> <arguments json>");
  }
  const kernel = new KernelClient(kernelAddress);
  try {
    await kernel.registerTool(defineTool({ id: toolId, effect: { kind: "idempotent", key: { fields: ["/order_id"] } } }));
    const res = await kernel.beginCall(toolId, argsJson);
    process.stdout.write(JSON.stringify({ capability: res.capability, key: res.call.key, call_id: res.call.callId }) + "\n");
  } finally {
    kernel.close();
  }
}

main().catch((err) => {
  process.stderr.write(`ts_runtime_begin: ${err && err.reason ? err.reason + ": " : ""}${err && err.message ? err.message : err}\n`);
  process.exit(1);
});
