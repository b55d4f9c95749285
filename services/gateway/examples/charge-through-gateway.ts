/**
 * The gateway in front of a third-party API: a tool `examples.gateway.charge` whose effect
 * is a POST to a payments API that honours `Idempotency-Key` (here a small local stand-in
 * for Stripe's, which counts the requests it receives per key). The example registers the
 * tool with its HTTP destination, begins a call in the kernel (as an agent runtime would),
 * forwards the charge through the gateway twice (one request reaches the API; the retry is
 * answered from the gateway's store) and shows a URL off the destination refused.
 *
 *     make build && node dist/services/gateway/examples/charge-through-gateway.js [ORDER_ID]
 *
 * Addresses come from KEYCAP_KERNEL_ADDRESS and KEYCAP_GATEWAY_ADDRESS (defaults those of
 * `make run`); the runtime credential by the clients' default lookup.
 */
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { GatewayClient, KernelClient, KeycapClientError } from "../../../clients/ts/src";

const TOOL = "examples.gateway.charge";

/** The third-party API: one charge per Idempotency-Key, the stored answer to a repeated key. */
function paymentsApi(): { server: http.Server; requests: Map<string, number> } {
  const requests = new Map<string, number>();
  const charges = new Map<string, string>();
  const server = http.createServer((req, res) => {
    const key = String(req.headers["idempotency-key"] ?? "");
    requests.set(key, (requests.get(key) ?? 0) + 1);
    const body = charges.get(key) ?? JSON.stringify({ id: `ch_${charges.size + 1}`, status: "succeeded" });
    charges.set(key, body);
    res.writeHead(201, { "content-type": "application/json", "request-id": `req_${requests.get(key)}` }).end(body);
  });
  return { server, requests };
}

async function main(orderId: string): Promise<void> {
  const kernel = new KernelClient(process.env["KEYCAP_KERNEL_ADDRESS"] || "127.0.0.1:50051");
  const gateway = new GatewayClient(process.env["KEYCAP_GATEWAY_ADDRESS"] || "127.0.0.1:50055");
  const api = paymentsApi();
  await new Promise<void>((r) => api.server.listen(0, "127.0.0.1", r));
  const port = (api.server.address() as AddressInfo).port;
  try {
    await kernel.registerTool({
      id: TOOL,
      effect: { kind: "idempotent", key: { fields: ["/order_id"] } },
      // A real API is public: leave allowPrivateNetwork off. This stand-in listens on loopback.
      httpDestination: { baseUrl: `http://127.0.0.1:${port}/v1/`, methods: ["POST"], responseHeaders: ["request-id"], allowPrivateNetwork: true },
    });
    const { capability, call } = await kernel.beginCall(TOOL, JSON.stringify({ order_id: orderId, amount_cents: 1250 }));
    const charge = { path: "charges", headers: { "content-type": "application/json", authorization: "Bearer sk_test_example" }, body: '{"amount":1250}' };
    const first = await gateway.forward(capability, charge);
    const again = await gateway.forward(capability, charge);
    console.log(`charge: ${first.status} ${first.body.toString()} replayed=${first.replayed}`);
    console.log(`retry:  ${again.status} ${again.body.toString()} replayed=${again.replayed}`);
    console.log(`the API saw ${api.requests.get(call!.key) ?? 0} request(s) with Idempotency-Key ${call!.key}`);
    const off = await gateway.forward(capability, { ...charge, path: "../admin/refunds" }).catch((err: unknown) => err);
    console.log(`off the destination: ${off instanceof KeycapClientError ? off.reason : "sent (wrong!)"}`);
    // The effect is done: say so, so the call is not left pending for recovery.
    await kernel.completeCall(call!.callId, first.status < 300 ? "succeeded" : "failed", `HTTP ${first.status}`);
    const ok =
      first.status === 201 &&
      again.replayed &&
      api.requests.get(call!.key) === 1 &&
      off instanceof KeycapClientError &&
      off.reason === "DESTINATION_NOT_ALLOWED";
    if (!ok) process.exitCode = 1;
  } finally {
    api.server.close();
    kernel.close();
    gateway.close();
  }
}

main(process.argv[2] ?? `order-${Date.now()}`).catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exitCode = 1;
});
