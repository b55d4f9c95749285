// A derivation must name at least one field: this must not compile.
import { defineTool } from "../../clients/ts/src";

export const charge = defineTool({
  id: "payments.charge",
  effect: { kind: "idempotent", key: { fields: [] } },
});
