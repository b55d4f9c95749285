// The generated type (not only defineTool): an Idempotent without a key must not compile.
import type { KernelClient } from "../../clients/ts/src";

export function register(client: KernelClient): unknown {
  return client.registerToolProto({
    toolId: "payments.charge",
    effectClass: { kind: { $case: "idempotent", value: { key: undefined } } },
    argumentsSchemaJson: "",
    registeredAt: undefined,
    owner: "",
    httpDestination: undefined,
  });
}
