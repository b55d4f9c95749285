/**
 * The three tools the torture worker runs, one per effect class. Each call's
 * arguments carry a unique operation id (`op`), and the payload it writes names
 * that op, so the checker can count effects per operation without trusting
 * keycap's keys.
 */
import { defineTool, type RuntimeTool, type ToolDefinition } from "../../clients/ts/src";

export const CHARGE: ToolDefinition = defineTool({ id: "torture.charge", effect: { kind: "idempotent", key: { fields: ["/order"] } } });
export const TICKET: ToolDefinition = defineTool({ id: "torture.ticket", effect: { kind: "queryable", requestIdField: "/request" } });
export const MAIL: ToolDefinition = defineTool({ id: "torture.mail", effect: { kind: "unsafe" } });

export type TortureToolId = "torture.charge" | "torture.ticket" | "torture.mail";

/** What a worker's tool writes as its effect. */
export interface EffectPayload {
  op: string;
  tool: TortureToolId;
}

/** Arguments of one planned operation: the field the tool's class keys on is the op id itself. */
export function argumentsFor(tool: TortureToolId, op: string): Record<string, string | number> {
  switch (tool) {
    case "torture.charge":
      return { order: op, amount_cents: 1250, requested_at: Date.now() };
    case "torture.ticket":
      return { request: op, title: "printer on fire" };
    case "torture.mail":
      return { op, to: "ops@example.test" };
  }
}

/** The op id back from recorded arguments (the checker's view). */
export function opOf(tool: string, args: Record<string, unknown>): string | undefined {
  const v = tool === "torture.charge" ? args["order"] : tool === "torture.ticket" ? args["request"] : args["op"];
  return typeof v === "string" ? v : undefined;
}

/** What the ledger said of an acknowledged write: a duplicate, answered from a recorded effect (replay), or kept in the shadow store. */
export interface AckFlags {
  duplicate: boolean;
  replayed: boolean;
  shadow: boolean;
}

/** The runtime's tools: each writes its payload once through the handle; `onAck` hears every acknowledged write. */
export function runtimeTools(onAck: (p: EffectPayload, flags: AckFlags) => void): RuntimeTool[] {
  const tool = (definition: ToolDefinition, id: TortureToolId): RuntimeTool => ({
    definition,
    handler: async (args, handle) => {
      const op = opOf(id, args as Record<string, unknown>);
      if (op === undefined) throw new Error(`recorded arguments of ${handle.callId} carry no op id`);
      const payload: EffectPayload = { op, tool: id };
      const res = await handle.write(JSON.stringify(payload));
      onAck(payload, { duplicate: res.duplicate, replayed: res.replayed, shadow: res.shadow });
      return op;
    },
  });
  return [tool(CHARGE, "torture.charge"), tool(TICKET, "torture.ticket"), tool(MAIL, "torture.mail")];
}
