/**
 * Who may do what on the kernel (DESIGN §9): a tool belongs to the principal that
 * registered it; other runtimes use it only when granted; operators list and settle
 * any call but never begin or resume one (they hold no capabilities).
 */
import type { Caller } from "./caller-auth";
import type { GrantStore } from "./grant-store";
import type { CompiledTool } from "./tool-definition";
import type { ToolRegistry } from "./tool-registry";
import { Reasons, refuse } from "../../common/src/refuse";

export class AccessPolicy {
  constructor(
    private readonly registry: ToolRegistry,
    private readonly grants: GrantStore,
  ) {}

  /** Begin, resume and register are a runtime's: they mint capabilities or create ownership. */
  requireRuntime(caller: Caller, action: string): void {
    if (caller.role !== "runtime") {
      throw refuse(
        Reasons.RUNTIME_REQUIRED,
        `${action} is for agent runtimes; ${caller.name} is an operator (operators list and settle calls, they do not mint capabilities)`,
        {
          principal: caller.name,
        },
      );
    }
  }

  requireOperator(caller: Caller, action: string): void {
    if (caller.role !== "operator") {
      throw refuse(Reasons.OPERATOR_REQUIRED, `${action} needs an operator principal; ${caller.name} is a runtime`, {
        principal: caller.name,
      });
    }
  }

  /** Whether `caller` (a runtime) owns or is granted `tool`. */
  async mayUse(caller: Caller, tool: CompiledTool): Promise<boolean> {
    if (tool.owner === caller.name) return true;
    return this.grants.has(tool.definition.toolId, caller.name);
  }

  /** Refuses unless the caller is an operator (when `operatorsToo`) or may use the tool. */
  async requireTool(caller: Caller, tool: CompiledTool, action: string, opts: { operatorsToo: boolean; callId?: string }): Promise<void> {
    if (caller.role === "operator" && opts.operatorsToo) return;
    this.requireRuntime(caller, action);
    if (await this.mayUse(caller, tool)) return;
    throw refuse(
      Reasons.TOOL_NOT_GRANTED,
      `principal ${caller.name} may not ${action} tool ${tool.definition.toolId}: it is owned by ${tool.owner ?? "nobody yet"}; an operator can grant it (keycap grants add ${tool.definition.toolId} ${caller.name})`,
      { tool_id: tool.definition.toolId, principal: caller.name, ...(opts.callId ? { call_id: opts.callId } : {}) },
    );
  }

  /** Re-registering an existing tool: only its owner or a grantee. */
  async requireRegistrable(caller: Caller, tool: CompiledTool): Promise<void> {
    if (await this.mayUse(caller, tool)) return;
    throw refuse(
      Reasons.TOOL_OWNED_BY_OTHER,
      `tool ${tool.definition.toolId} is registered by another principal; ${caller.name} cannot register or redefine it. To use it as it is, an operator grants it (keycap grants add ${tool.definition.toolId} ${caller.name}); for another definition, register it under another id`,
      { tool_id: tool.definition.toolId, principal: caller.name },
    );
  }

  /** The tools whose calls the caller may list: undefined for all (operators). */
  async visibleTools(caller: Caller): Promise<string[] | undefined> {
    if (caller.role === "operator") return undefined;
    const [owned, granted] = await Promise.all([this.registry.ownedBy(caller.name), this.grants.toolsOf(caller.name)]);
    return [...new Set([...owned, ...granted])];
  }
}
