// An Idempotent tool must say how its key is derived: this must not compile.
import { defineTool } from "../../clients/ts/src";

export const charge = defineTool({
  id: "payments.charge",
  effect: { kind: "idempotent" },
});
