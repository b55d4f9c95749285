/**
 * A small keycap-aware MCP server (issue 29): `charge` (Idempotent, keyed on the order and the
 * amount) charges through a Stripe-like API with the kernel's key as its `Idempotency-Key`;
 * `send_receipt` (Unsafe) sends a receipt, once per capability. Both are governed: a call
 * without a capability for exactly that tool (and, for `charge`, exactly these arguments) is
 * refused before the handler runs and recorded as `sink:payments`. Run behind `keycap mcp`
 * with a policy naming the upstream `payments` (docs/mcp-server-typescript.md):
 *
 *     payments:
 *       command: node
 *       args: [dist/services/sink/examples/mcp-charge-server.js]
 *       env: { CHARGE_API_URL: "http://127.0.0.1:4242", KEYCAP_KERNEL_ADDRESS: "127.0.0.1:50051", MONGODB_URI: "...", KEYCAP_MONGODB_DATABASE: "keycap" }
 *       tools:
 *         charge: { class: idempotent, key: [/order_id, /amount_cents] }
 *         send_receipt: { class: unsafe }
 */
import { MongoClient } from "mongodb";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema, type CallToolResult, type Tool } from "@modelcontextprotocol/sdk/types.js";
import { KernelKeySource, keycapCallOf, McpSink, MongoSpentStore, openSinkRefusalStore, type Logger, type McpSinkOptions } from "../src";

const TOOLS: Tool[] = [
  {
    name: "charge",
    description: "Charges an order (once per order and amount).",
    inputSchema: {
      type: "object",
      properties: { order_id: { type: "string" }, amount_cents: { type: "integer" }, note: { type: "string" } },
      required: ["order_id", "amount_cents"],
    },
    annotations: { idempotentHint: true },
  },
  {
    name: "send_receipt",
    description: "E-mails a receipt (every call is a mail).",
    inputSchema: { type: "object", properties: { order_id: { type: "string" }, email: { type: "string" } }, required: ["order_id", "email"] },
  },
];

/** The governed tools: `mcp:payments/charge` and `mcp:payments/send_receipt`, as the gateway names them. */
export const GOVERNED: McpSinkOptions["tools"] = { charge: true, send_receipt: true };

/** The server, and how often each handler ran (a refused call never reaches one). */
export interface ChargeServer {
  server: Server;
  handlerCalls: Record<string, number>;
}

/** The example's MCP server, its tools' handlers calling the API at `apiUrl`. */
export function createChargeServer(apiUrl: string): ChargeServer {
  const handlerCalls: Record<string, number> = { charge: 0, send_receipt: 0 };
  const server = new Server({ name: "payments", version: "1.0.0" }, { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: TOOLS }));
  server.setRequestHandler(CallToolRequestSchema, async (request, extra): Promise<CallToolResult> => {
    const args = request.params.arguments ?? {};
    const name = request.params.name;
    if (name !== "charge" && name !== "send_receipt") throw new Error(`no tool ${name}`);
    handlerCalls[name] = (handlerCalls[name] ?? 0) + 1;
    // The call the middleware admitted: for charge, the key it re-derived from these arguments.
    const call = keycapCallOf(extra);
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (call.idempotencyKey !== undefined) headers["idempotency-key"] = call.idempotencyKey;
    const path = name === "charge" ? "/v1/charges" : "/v1/receipts";
    const res = await fetch(`${apiUrl}${path}`, { method: "POST", headers, body: JSON.stringify(args) });
    const body = (await res.json()) as { id?: string; error?: string };
    if (!res.ok) return { content: [{ type: "text", text: `the API refused: ${body.error ?? res.status}` }], isError: true };
    return { content: [{ type: "text", text: `${name === "charge" ? "charged" : "receipt sent"}: ${body.id ?? "?"}` }] };
  });
  return { server, handlerCalls };
}

/** A logger for the sink's refusal store: JSON lines on stderr (stdout is the MCP stream). */
const stderrLogger: Logger = {
  debug: () => undefined,
  info: () => undefined,
  warn: (fields, message) => void process.stderr.write(`${JSON.stringify({ level: "warn", ...fields, msg: message })}\n`),
  error: (fields, message) => void process.stderr.write(`${JSON.stringify({ level: "error", ...fields, msg: message })}\n`),
  child: () => stderrLogger,
};

function setting(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`set ${name}`);
  return v;
}

/** Serves the example on stdio, with the kernel's keys and keycap's database for spent capabilities and refusals. */
async function main(): Promise<void> {
  const mongo = await MongoClient.connect(setting("MONGODB_URI"));
  const db = mongo.db(process.env["KEYCAP_MONGODB_DATABASE"] || "keycap");
  const keys = new KernelKeySource(setting("KEYCAP_KERNEL_ADDRESS"));
  const sink = new McpSink({
    name: "payments",
    tools: GOVERNED,
    keys,
    spentStore: await MongoSpentStore.open(db),
    refusals: await openSinkRefusalStore(db, "payments", stderrLogger),
  });
  const { server } = createChargeServer(setting("CHARGE_API_URL"));
  server.onclose = () => {
    keys.close();
    void mongo.close();
  };
  await server.connect(sink.guard(new StdioServerTransport()));
}

if (require.main === module) {
  main().catch((err: unknown) => {
    process.stderr.write(`mcp-charge-server: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
