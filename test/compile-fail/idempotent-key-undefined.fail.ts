// `key: undefined` is no way around the rule: this must not compile.
import { defineTool } from "../../clients/ts/src";

export const charge = defineTool({
  id: "payments.charge",
  effect: { kind: "idempotent", key: undefined },
});
