/**
 * A tiny Stripe-like payments API for the keycap-aware MCP server example: `POST /v1/charges`
 * with an `Idempotency-Key` header charges once per key and answers a repeated key with the
 * first answer (as Stripe does); a charge without a key is refused. `POST /v1/receipts` has
 * no such protection: every request sends a receipt. It counts every request, so a test can
 * tell requests from effects.
 *
 *     node dist/services/sink/examples/charge-api.js   # prints its URL
 */
import * as http from "node:http";
import type { AddressInfo } from "node:net";

/** One request as the API saw it. */
export interface ApiRequest {
  path: string;
  idempotencyKey: string | undefined;
  body: Record<string, unknown>;
}

/** A charge made (one per idempotency key). */
export interface Charge {
  id: string;
  idempotencyKey: string;
  orderId: string;
  amountCents: number;
}

/** A running API and what it saw. */
export interface ChargeApi {
  url: string;
  requests: ApiRequest[];
  charges: Charge[];
  receipts: Record<string, unknown>[];
  close(): Promise<void>;
}

/** Starts the API on 127.0.0.1 (`port` 0: any free port). */
export async function startChargeApi(port = 0): Promise<ChargeApi> {
  const requests: ApiRequest[] = [];
  const charges: Charge[] = [];
  const receipts: Record<string, unknown>[] = [];
  const byKey = new Map<string, Charge>();
  const server = http.createServer((req, res) => {
    let text = "";
    req.on("data", (d: Buffer) => (text += d.toString()));
    req.on("end", () => {
      const body = parseBody(text);
      const key = req.headers["idempotency-key"];
      const idempotencyKey = typeof key === "string" ? key : undefined;
      const path = req.url ?? "/";
      requests.push({ path, idempotencyKey, body });
      const answer = (status: number, value: unknown): void => {
        res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(value));
      };
      if (req.method === "POST" && path === "/v1/charges") {
        if (!idempotencyKey) return answer(400, { error: "an Idempotency-Key header is required" });
        let charge = byKey.get(idempotencyKey);
        if (!charge) {
          charge = { id: `ch_${charges.length + 1}`, idempotencyKey, orderId: String(body["order_id"]), amountCents: Number(body["amount_cents"]) };
          charges.push(charge);
          byKey.set(idempotencyKey, charge);
        }
        return answer(200, charge);
      }
      if (req.method === "POST" && path === "/v1/receipts") {
        receipts.push(body);
        return answer(200, { id: `rc_${receipts.length}` });
      }
      answer(404, { error: "not found" });
    });
  });
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  const { port: bound } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${bound}`,
    requests,
    charges,
    receipts,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

function parseBody(text: string): Record<string, unknown> {
  try {
    const v: unknown = JSON.parse(text);
    return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

if (require.main === module) {
  void startChargeApi(Number(process.env["PORT"] ?? 0)).then((api) => console.log(api.url));
}
