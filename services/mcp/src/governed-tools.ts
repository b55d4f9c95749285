/**
 * The start-time check of a policy against what the upstreams actually offer, and the table
 * of tools the gateway exposes. Annotations are defaults at most, never trust: a tool the
 * policy does not name is Unsafe; a tool annotated `idempotentHint: true` that the policy
 * leaves without a key derivation refuses the start (a tool that cannot derive a stable key
 * cannot be Idempotent); a policy entry for a tool the upstream does not have, or a key
 * pointer into an argument the tool's input schema does not define, refuses it too.
 */
import { kernelToolId } from "../../common/src/mcp-contract";
import type { Policy, ToolPolicy } from "./policy";

/** An upstream tool as its tools/list describes it (the parts the gateway reads). */
export interface UpstreamTool {
  name: string;
  description?: string;
  inputSchema: { type: "object"; properties?: Record<string, object>; required?: string[]; [k: string]: unknown };
  annotations?: { idempotentHint?: boolean; readOnlyHint?: boolean; destructiveHint?: boolean; [k: string]: unknown };
  [k: string]: unknown;
}

/** One tool as the host sees it, and how its calls are governed. */
export interface GovernedTool {
  /** The name the host calls (prefixed with the upstream's when there is more than one). */
  exposedName: string;
  upstream: string;
  /** The name upstream. */
  name: string;
  /** The kernel tool id: `mcp:<upstream>/<tool>`. */
  toolId: string;
  policy: ToolPolicy;
  /** True when the policy did not name the tool (then it is Unsafe). */
  defaulted: boolean;
  definition: UpstreamTool;
}

/** The policy does not fit the upstreams; each problem names the policy path it concerns. */
export class PolicyMismatchError extends Error {
  constructor(readonly problems: readonly string[]) {
    super(`the policy does not fit the upstreams:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
    this.name = "PolicyMismatchError";
  }
}

// Keycap-aware servers name their governed tools the same way, so the rule lives in common.
export { kernelToolId } from "../../common/src/mcp-contract";

/**
 * Checks the policy against each upstream's tools and returns the exposed tools.
 * @throws PolicyMismatchError listing every problem (not only the first).
 */
export function governTools(policy: Policy, listed: ReadonlyMap<string, readonly UpstreamTool[]>): GovernedTool[] {
  const problems: string[] = [];
  const out: GovernedTool[] = [];
  const prefixed = policy.upstreams.length > 1;
  for (const upstream of policy.upstreams) {
    const tools = listed.get(upstream.name) ?? [];
    const byName = new Map(tools.map((t) => [t.name, t]));
    for (const name of upstream.tools.keys()) {
      if (!byName.has(name)) {
        problems.push(
          `upstreams.${upstream.name}.tools.${name}: upstream ${upstream.name} has no tool ${JSON.stringify(name)} (it has: ${[...byName.keys()].join(", ") || "none"})`,
        );
      }
    }
    for (const tool of tools) {
      const path = `upstreams.${upstream.name}.tools.${tool.name}`;
      const declared = upstream.tools.get(tool.name);
      if (!declared && tool.annotations?.idempotentHint === true) {
        problems.push(`${path}: the upstream annotates this tool idempotentHint: true, but the policy gives it no key derivation. ${suggestKey(tool)}`);
        continue;
      }
      const policyOf: ToolPolicy = declared ?? { class: "unsafe" };
      problems.push(...pointerProblems(path, policyOf, tool));
      out.push({
        exposedName: prefixed ? `${upstream.name}${policy.toolNameSeparator}${tool.name}` : tool.name,
        upstream: upstream.name,
        name: tool.name,
        toolId: kernelToolId(upstream.name, tool.name),
        policy: policyOf,
        defaulted: !declared,
        definition: tool,
      });
    }
  }
  if (problems.length) throw new PolicyMismatchError(problems);
  return out;
}

/** What to write in the policy for a tool that needs a derivation: its required arguments, which usually identify the effect. */
export function suggestKey(tool: UpstreamTool): string {
  const props = Object.keys(tool.inputSchema.properties ?? {});
  const key = suggestedKey(tool).join(", ");
  const readOnly = tool.annotations?.readOnlyHint === true ? `, or \`class: read\` if it only reads (it is annotated readOnlyHint)` : "";
  return (
    `Declare it, e.g. \`${tool.name}: { class: idempotent, key: [${key || '"/<argument>"'}] }\` naming the arguments that identify one effect` +
    (props.length ? ` (its arguments: ${props.join(", ")})` : "") +
    `${readOnly}, or \`class: unsafe\` if retrying it is not safe.`
  );
}

/** Pointers (JSON-quoted) to the tool's required arguments, else all its arguments. */
export function suggestedKey(tool: UpstreamTool): string[] {
  const required = tool.inputSchema.required ?? [];
  const names = required.length ? required : Object.keys(tool.inputSchema.properties ?? {});
  return names.map((n) => JSON.stringify(`/${n.replace(/~/g, "~0").replace(/\//g, "~1")}`));
}

function pointerProblems(path: string, policy: ToolPolicy, tool: UpstreamTool): string[] {
  const pointers =
    policy.class === "idempotent"
      ? policy.key.map((p, i) => [`${path}.key[${i}]`, p] as const)
      : policy.class === "queryable"
        ? [[`${path}.request_id`, policy.requestId] as const]
        : [];
  const problems: string[] = [];
  const props = tool.inputSchema.properties;
  for (const [where, pointer] of pointers) {
    // The schema checked its RFC 6901 syntax; the kernel checks it whole again at registration.
    const first = pointer.split("/")[1]?.replace(/~1/g, "/").replace(/~0/g, "~");
    if (props && first !== undefined && !Object.prototype.hasOwnProperty.call(props, first)) {
      problems.push(
        `${where}: ${JSON.stringify(pointer)} names an argument the tool's input schema does not define (it defines: ${Object.keys(props).join(", ") || "none"})`,
      );
    }
  }
  return problems;
}
