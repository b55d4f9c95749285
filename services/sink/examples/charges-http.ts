/**
 * Your service as the sink: a small "charges" HTTP API that performs its effect only under
 * a keycap capability for `examples.sink.charge`, and uses the kernel-derived key as the
 * charge's own idempotency key. The example registers the tool, begins a call in the kernel
 * (as an agent runtime would), sends the capability to the service twice (one charge, then
 * the stored answer), then sends a forged capability (refused, 401 BAD_SIGNATURE).
 *
 *     make build && node dist/services/sink/examples/charges-http.js [ORDER_ID]
 *
 * The kernel address comes from KEYCAP_KERNEL_ADDRESS (default that of `make run`); the
 * runtime credential by the clients' default lookup (`./.keycap/runtime-token` after
 * `make run`).
 */
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { KernelClient } from "../../../clients/ts/src";
import { capabilityOf, KernelKeySource, protectHttp, Sink } from "../src";

const TOOL = "examples.sink.charge";

async function send(port: number, capability: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`http://127.0.0.1:${port}/charges`, { method: "POST", headers: { authorization: `Bearer ${capability}` } });
  return { status: res.status, body: await res.text() };
}

async function main(orderId: string): Promise<void> {
  const kernelAddress = process.env["KEYCAP_KERNEL_ADDRESS"] || "127.0.0.1:50051";
  const kernel = new KernelClient(kernelAddress);
  const keys = new KernelKeySource(kernelAddress);
  // The service's own store: one charge per key (a unique index in a real database).
  const charges = new Map<string, { charge_id: string; order: string }>();
  const sink = new Sink({ name: "examples-charges", tools: [TOOL], keys });
  const server = http.createServer(
    protectHttp(sink, (req, res) => {
      const { key } = capabilityOf(req);
      const k = key ?? "";
      const existing = charges.get(k);
      const charge = existing ?? { charge_id: `ch_${charges.size + 1}`, order: orderId };
      charges.set(k, charge);
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ ...charge, replayed: existing !== undefined }));
    }),
  );
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  try {
    await kernel.registerTool({ id: TOOL, effect: { kind: "idempotent", key: { fields: ["/order_id"] } } });
    const { capability, call } = await kernel.beginCall(TOOL, JSON.stringify({ order_id: orderId, amount_cents: 1250 }));
    const first = await send(port, capability);
    // The effect is done: say so, so the call is not left pending for recovery.
    await kernel.completeCall(call!.callId, first.status === 200 ? "succeeded" : "failed", `HTTP ${first.status}`);
    const again = await send(port, capability);
    console.log(`charge: ${first.status} ${first.body}`);
    console.log(`retry:  ${again.status} ${again.body}`);
    // A forgery: the same claims with the signature of another token.
    const [h, p] = capability.split(".");
    const forged = await send(port, `${h}.${p}.${"A".repeat(86)}`);
    console.log(`forged: ${forged.status} ${JSON.parse(forged.body).reason as string}`);
    if (first.status !== 200 || !again.body.includes('"replayed":true') || forged.status !== 401) process.exitCode = 1;
  } finally {
    server.close();
    keys.close();
    kernel.close();
  }
}

main(process.argv[2] ?? `S-${Date.now()}`).catch((err: unknown) => {
  console.error(`charges-http: ${err instanceof Error ? err.message : String(err)}`);
  process.exitCode = 1;
});
