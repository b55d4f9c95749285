import type { Tool } from "../../gen/ts/keycap/kernel/v1/kernel";
import type { ToolValid } from "../../gen/ts/keycap/kernel/v1/kernel.valid";

/**
 * A tool the generated Valid type forbids, passed on anyway: what a client in
 * another language, or hand-built bytes, can send. Tests of the server's
 * refusals use it; the compile-fail fixtures show the type refusing the same.
 */
export function unchecked(tool: Tool): ToolValid {
  return tool as ToolValid;
}
