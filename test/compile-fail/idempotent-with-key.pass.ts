// The compile-pass twin: the same registration with a key derivation compiles,
// so the failing fixtures fail for the rule, not for something else.
import { defineTool, KernelClient } from "../../clients/ts/src";

export const charge = defineTool({
  id: "payments.charge",
  effect: { kind: "idempotent", key: { fields: ["/order_id"], contextFields: ["run_id"] } },
});

export async function register(kernel: KernelClient): Promise<void> {
  await kernel.registerTool(charge);
}
