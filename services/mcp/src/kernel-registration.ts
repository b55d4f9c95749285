/**
 * Each governed tool is a kernel tool `mcp:<upstream>/<tool>` with the policy's effect class and
 * the upstream's input schema as its argument schema. The same definition again is a no-op; an
 * upstream (or a policy) that changed a tool's definition is refused by the kernel as a changed
 * definition, not silently merged, and the start stops.
 */
import { KeycapClientError, type KernelClient, type ToolDefinition } from "../../../clients/ts/src";
import type { GovernedTool } from "./governed-tools";

/** Some tools could not be registered; each problem names the policy path and the kernel's reason. */
export class RegistrationError extends Error {
  constructor(readonly problems: readonly string[]) {
    super(`the kernel refused tool definitions:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
    this.name = "RegistrationError";
  }
}

/** The kernel definition of a governed tool (undefined for `read` tools, which are not journaled). */
export function kernelDefinition(tool: GovernedTool): ToolDefinition | undefined {
  const { $schema: _ignored, ...schema } = tool.definition.inputSchema;
  const base = { id: tool.toolId, argumentsSchema: schema };
  switch (tool.policy.class) {
    case "idempotent":
      return {
        ...base,
        effect: {
          kind: "idempotent",
          key: { fields: tool.policy.key, version: tool.policy.keyVersion, ...(tool.policy.runScope ? { contextFields: ["run_id"] as const } : {}) },
        },
      };
    case "queryable":
      return { ...base, effect: { kind: "queryable", requestIdField: tool.policy.requestId } };
    case "unsafe":
      return { ...base, effect: { kind: "unsafe" } };
    case "read":
      return undefined;
  }
}

/** Registers every governed tool. @throws RegistrationError naming every refused tool. */
export async function registerGovernedTools(kernel: KernelClient, tools: readonly GovernedTool[]): Promise<void> {
  const problems: string[] = [];
  await Promise.all(
    tools.map(async (tool) => {
      const def = kernelDefinition(tool);
      if (!def) return;
      try {
        await kernel.registerTool(def, { timeoutMs: 15_000 });
      } catch (err) {
        const e = KeycapClientError.from(err);
        problems.push(`upstreams.${tool.upstream}.tools.${tool.name} (${tool.toolId}): ${e.summary}`);
      }
    }),
  );
  if (problems.length) throw new RegistrationError(problems.sort());
}
