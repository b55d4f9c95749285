/**
 * The upstream of the MCP gateway benchmark: one tool, `create_order`, answered at once with a
 * text result and no state, so what is measured is the path to it (direct, or through
 * `keycap mcp`), not its work. Speaks MCP on stdio with the official SDK.
 */
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const server = new Server({ name: "bench-upstream", version: "1.0.0" }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, () => ({
  tools: [
    {
      name: "create_order",
      description: "Creates an order.",
      inputSchema: { type: "object", properties: { order_id: { type: "string" }, amount: { type: "number" } }, required: ["order_id", "amount"] },
      annotations: { idempotentHint: true },
    },
  ],
}));
server.setRequestHandler(CallToolRequestSchema, (req) => ({
  content: [{ type: "text", text: `order ${String(req.params.arguments?.["order_id"])} created` }],
}));
void server.connect(new StdioServerTransport());
