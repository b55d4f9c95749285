// The generated type: a tool whose effect class is left unset must not compile.
import type { ToolValid } from "../../gen/ts/keycap/kernel/v1/kernel.valid";

export const tool: ToolValid = { toolId: "payments.charge", effectClass: { kind: undefined }, argumentsSchemaJson: "", registeredAt: undefined, owner: "", httpDestination: undefined };
