/**
 * An effect-counting MCP server of keycap's own, for exact counts through the MCP gateway
 * (issue 28). It speaks MCP over stdio with the official SDK and logs every request and every
 * effect as one JSON line in COUNTING_STATE_FILE, which outlives the process (the gateway
 * starts a new one when it restarts).
 *
 * Like an API that honours an idempotency key (Stripe's), `create_order` performs its effect
 * once per `_meta` `io.keycap/idempotency-key` and answers a repeated key with the stored
 * answer, so a resend under the same key after a crash is two requests, one effect.
 * `send_message` has no such protection: every request is an effect.
 *
 * Arguments that steer it: `hang: true` performs the effect and never answers (the gateway is
 * killed waiting); `delay_ms` holds the answer; `decline: true` answers `isError: true`;
 * `crash_once: true` exits the process on an order's first request, before any effect;
 * `progress_steps: n` sends n progress notifications (when the request has a progress token)
 * and one log message before answering.
 *
 * Usage: COUNTING_STATE_FILE=/tmp/x.jsonl node dist/test/support/counting-mcp-server.js (or the file as its argument)
 */
import * as fs from "node:fs";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import {
  CallToolRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListToolsRequestSchema,
  type CallToolResult,
  type Tool,
} from "@modelcontextprotocol/sdk/types.js";

/** One line of the state file. */
export interface CountingEvent {
  event: "request" | "effect";
  tool: string;
  key: string | null;
  args: Record<string, unknown>;
  meta: Record<string, unknown>;
  /** effect lines: the answer given (and replayed to the key). */
  answer?: CallToolResult;
}

/** Reads a state file's events (what the tests count). */
export function readEvents(file: string): CountingEvent[] {
  if (!fs.existsSync(file)) return [];
  return fs
    .readFileSync(file, "utf8")
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as CountingEvent);
}

const TOOLS: Tool[] = [
  {
    name: "create_order",
    description: "Creates an order (one per idempotency key).",
    inputSchema: {
      type: "object",
      properties: {
        order_id: { type: "string" },
        amount: { type: "number" },
        note: { type: "string" },
        hang: { type: "boolean" },
        delay_ms: { type: "number" },
        decline: { type: "boolean" },
        progress_steps: { type: "number" },
        crash_once: { type: "boolean" },
      },
      required: ["order_id", "amount"],
    },
    annotations: { idempotentHint: true, destructiveHint: false },
  },
  {
    name: "send_message",
    description: "Sends a message (every request is a message).",
    inputSchema: { type: "object", properties: { to: { type: "string" }, text: { type: "string" }, hang: { type: "boolean" } }, required: ["to", "text"] },
  },
  {
    name: "get_status",
    description: "Reads the number of effects so far.",
    inputSchema: { type: "object", properties: {} },
    annotations: { readOnlyHint: true },
  },
];

function main(): void {
  const file = process.env["COUNTING_STATE_FILE"] ?? process.argv[2];
  if (!file) throw new Error("COUNTING_STATE_FILE (or the first argument) is required");
  const stored = new Map<string, CallToolResult>();
  for (const e of readEvents(file)) if (e.event === "effect" && e.key && e.answer) stored.set(e.key, e.answer);
  const log = (e: CountingEvent): void => fs.appendFileSync(file, JSON.stringify(e) + "\n");

  const server = new Server(
    { name: "counting-upstream", version: "1.0.0" },
    { capabilities: { tools: { listChanged: true }, logging: {}, resources: { listChanged: true }, prompts: { listChanged: true } } },
  );
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: TOOLS }));
  // Lists that change: get_status with announce_changes says so for resources, prompts and tools.
  server.setRequestHandler(ListResourcesRequestSchema, () => ({ resources: [] }));
  server.setRequestHandler(ListPromptsRequestSchema, () => ({ prompts: [] }));
  server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
    const args = req.params.arguments ?? {};
    const meta = (req.params._meta ?? {}) as Record<string, unknown>;
    const key = typeof meta["io.keycap/idempotency-key"] === "string" ? meta["io.keycap/idempotency-key"] : null;
    const tool = req.params.name;
    log({ event: "request", tool, key, args, meta });
    if (tool === "get_status" && args["announce_changes"] === true) {
      await server.sendResourceListChanged();
      await server.sendPromptListChanged();
      await server.sendToolListChanged();
    }
    if (tool === "get_status") {
      const effects = readEvents(file).filter((e) => e.event === "effect").length;
      return { content: [{ type: "text", text: `effects so far: ${effects}` }] };
    }
    if (args["crash_once"] === true && readEvents(file).filter((e) => e.event === "request" && e.args["order_id"] === args["order_id"]).length === 1) {
      // The first request of this order: the server dies before any effect (the gateway loses its connection).
      process.exit(3);
    }
    const replay = tool === "create_order" && key !== null ? stored.get(key) : undefined;
    if (replay) return replay;
    const n = readEvents(file).filter((e) => e.event === "effect").length + 1;
    const answer: CallToolResult =
      tool === "create_order"
        ? args["decline"] === true
          ? { content: [{ type: "text", text: `order ${String(args["order_id"])} declined` }], isError: true }
          : { content: [{ type: "text", text: `order ${String(args["order_id"])} created as effect #${n}` }], structuredContent: { effect: n } }
        : { content: [{ type: "text", text: `message to ${String(args["to"])} sent as effect #${n}` }] };
    log({ event: "effect", tool, key, args, meta, answer });
    if (tool === "create_order" && key !== null) stored.set(key, answer);
    if (args["hang"] === true) return new Promise<never>(() => undefined);
    const steps = typeof args["progress_steps"] === "number" ? args["progress_steps"] : 0;
    const progressToken = req.params._meta?.progressToken;
    for (let i = 1; i <= steps && progressToken !== undefined; i++) {
      await extra.sendNotification({ method: "notifications/progress", params: { progressToken, progress: i, total: steps } });
      // Work between steps: the SDK client runs notification handlers a tick after it reads them,
      // so a notification read in the same chunk as the response would be dropped as late.
      await new Promise((r) => setTimeout(r, 20));
    }
    if (steps > 0) await server.sendLoggingMessage({ level: "info", logger: "orders", data: `order ${String(args["order_id"])}: ${steps} steps done` });
    const delay = typeof args["delay_ms"] === "number" ? args["delay_ms"] : 0;
    if (delay > 0) await new Promise((r) => setTimeout(r, delay));
    return answer;
  });
  void server.connect(new StdioServerTransport());
}

if (require.main === module) main();
