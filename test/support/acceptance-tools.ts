/**
 * The tools of the keyed-capability acceptance suite, with their code. Loaded
 * by the tool-runner process and by `keycap recover --handlers`.
 *
 * KEYCAP_TEST_CRASH_POINT=before-write | after-write makes a handler print
 * `CRASH-POINT <point> <callId>` and hang there, so a test can SIGKILL the
 * process at exactly that point of the call.
 */
import { defineTool, type CapabilityHandle, type RuntimeTool } from "../../clients/ts/src";

export const charge = defineTool({
  id: "acceptance.charge",
  effect: { kind: "idempotent", key: { fields: ["/order_id", "/amount_cents"], contextFields: ["run_id"] } },
  argumentsSchema: {
    type: "object",
    properties: {
      order_id: { type: "string" },
      amount_cents: { type: "integer" },
      requested_at: { type: "string", format: "date-time" },
    },
    required: ["order_id", "amount_cents"],
  },
});

export const notify = defineTool({ id: "acceptance.notify", effect: { kind: "queryable", requestIdField: "/request_id" } });

export const transfer = defineTool({ id: "acceptance.transfer", effect: { kind: "unsafe" } });

async function crashPoint(point: "before-write" | "after-write", handle: CapabilityHandle): Promise<void> {
  // Only the first attempt crashes: recovery re-runs the same code without it.
  if (process.env["KEYCAP_TEST_CRASH_POINT"] !== point || handle.attempt !== 1) return;
  process.stdout.write(`CRASH-POINT ${point} ${handle.callId}\n`);
  await new Promise(() => undefined);
}

async function writeEffect(args: unknown, handle: CapabilityHandle): Promise<string> {
  await crashPoint("before-write", handle);
  const res = await handle.write(JSON.stringify(args));
  await crashPoint("after-write", handle);
  return `${res.duplicate ? "duplicate" : "written"} ${res.entry?.entryId ?? ""}`;
}

export const tools: RuntimeTool[] = [
  { definition: charge, handler: writeEffect },
  { definition: notify, handler: writeEffect },
  { definition: transfer, handler: writeEffect },
];
