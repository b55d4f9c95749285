// The generated Valid types accept the shape the proto's rules allow.
import type { KernelClient } from "../../clients/ts/src";
import { ContextField } from "../../gen/ts/keycap/effect/v1/effect";
import type { ToolValid } from "../../gen/ts/keycap/kernel/v1/kernel.valid";

export const tool: ToolValid = {
  toolId: "payments.charge",
  effectClass: { kind: { $case: "idempotent", value: { key: { fields: ["/order_id"], version: 1, contextFields: [ContextField.CONTEXT_FIELD_RUN_ID] } } } },
  argumentsSchemaJson: "",
  registeredAt: undefined,
  owner: "",
  httpDestination: undefined,
};

export function register(client: KernelClient): unknown {
  return client.registerToolProto(tool);
}
