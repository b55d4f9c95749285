import { CallState, ResumeAction, type Call } from "../gen/keycap/kernel/v1/kernel";
import { EffectKind } from "../gen/keycap/effect/v1/effect";
import type { CapabilityHandle } from "./capability-handle";
import { KeycapClientError } from "./errors";
import type { KernelClient, BeginOptions } from "./kernel-client";
import type { ToolDefinition } from "./tool-definition";

/**
 * A tool's code. It receives the call's arguments and a capability handle;
 * its effects go through `handle.write()`, which carries the kernel's key.
 * It must be safe to run again for the same call: recovery re-runs it.
 */
export type ToolHandler = (args: unknown, handle: CapabilityHandle) => Promise<string | void>;

/** A tool the runtime can run and recover. */
export interface RuntimeTool {
  definition: ToolDefinition;
  handler: ToolHandler;
}

/** What recovery did (or, in a dry run, would do) with one pending call. */
export interface RecoveryStep {
  callId: string;
  toolId: string;
  effect: "idempotent" | "queryable" | "unsafe" | "unknown";
  attempt: number;
  /** The action per class. */
  plan: "retry-under-same-key" | "ask-ledger-then-retry" | "mark-indeterminate" | "no-handler";
  /** What happened: "dry-run", "completed", "done-in-ledger", "already-completed", "indeterminate", "skipped", "failed". */
  result: string;
  detail: string;
  /** When `result` is "failed": the gRPC status name and the machine-readable reason (branch on these, not on `detail`). */
  error?: { code: string; reason: string };
}

export interface RecoverOptions {
  /** Only calls of these tools; default: every tool this runtime knows. */
  toolIds?: readonly string[];
  /** Report the plan without doing anything. */
  dryRun?: boolean;
  /** Also handle pending calls of tools without a handler here (queryable lookups, unsafe → indeterminate). */
  includeUnknownTools?: boolean;
}

/**
 * The run mode every run() of a Runtime begins its calls in, unless a run() says otherwise
 * (ADR 0028, docs/run-modes.md).
 *
 * @example
 * // Replays recorded run "run-1" as run "run-1-replay": same code, no new effect.
 * const replay = new Runtime(kernel, tools, { mode: "replay", replayOf: "run-1" });
 * await replay.run("payments.charge", args, { runId: "run-1-replay" });
 */
export type RunModeOptions = Pick<BeginOptions, "mode" | "replayOf" | "shadows">;

/**
 * Runs tools under capabilities (begin → handler → complete) and recovers
 * the calls a crash left pending, each by its effect class: Idempotent calls
 * are re-run under the same key; Queryable calls ask the ledger first; Unsafe
 * calls are never retried (the kernel marks them indeterminate).
 */
export class Runtime {
  private readonly tools = new Map<string, RuntimeTool>();

  constructor(
    private readonly kernel: KernelClient,
    tools: readonly RuntimeTool[] = [],
    private readonly runMode: RunModeOptions = {},
  ) {
    for (const t of tools) this.tools.set(t.definition.id, t);
  }

  /** Registers every known tool with the kernel (a no-op for ones already there). */
  async registerAll(): Promise<void> {
    for (const t of this.tools.values()) await this.kernel.registerTool(t.definition);
  }

  /**
   * Runs one call: begin, the handler, complete. If the handler throws, the
   * call stays pending for recover(): whether its effect happened is for the
   * ledger to say, not for a guess here.
   *
   * In a replay (the Runtime's or this run's `mode`), the handler's writes are answered from
   * the recorded effects and write nothing, and `recorded` is the recorded call it matched,
   * with the outcome the recorded run got.
   */
  async run(toolId: string, args: object | string, opts: BeginOptions = {}): Promise<{ handle: CapabilityHandle; output: string; recorded?: Call }> {
    const tool = this.require(toolId);
    const res = await this.kernel.beginCall(toolId, typeof args === "string" ? args : JSON.stringify(args), { ...this.runMode, ...opts });
    const recorded = res.recordedCall ? { recorded: res.recordedCall } : {};
    const handle = this.kernel.handleFor(res.call, res.capability, res.capabilityExpiresAt);
    // A step run again under its call id (an agent's in-place retry) may have
    // finished, or taken effect, the first time.
    if (res.existingCall && res.call?.state === CallState.CALL_STATE_COMPLETED) return { handle, output: res.call.outcomeDetail, ...recorded };
    if (res.existingCall && handle.effectKind === EffectKind.EFFECT_KIND_QUERYABLE) {
      // The capability is single-use: once its write took effect, writing again is
      // refused CAPABILITY_REUSED. Ask the ledger first, as recovery does.
      const found = await handle.lookup();
      if (found.found) {
        await handle.complete("succeeded", "");
        return { handle, output: "", ...recorded };
      }
    }
    const output = (await tool.handler(typeof args === "string" ? JSON.parse(args) : args, handle)) ?? "";
    await handle.complete("succeeded", output);
    return { handle, output, ...recorded };
  }

  /** Finds pending calls and resumes each by its class. */
  async recover(opts: RecoverOptions = {}): Promise<RecoveryStep[]> {
    const filter = opts.toolIds && opts.toolIds.length > 0 ? new Set(opts.toolIds) : undefined;
    const pending: Call[] = [];
    if (filter) for (const id of filter) pending.push(...(await this.kernel.listPendingCalls(id)));
    else pending.push(...(await this.kernel.listPendingCalls()));
    const steps: RecoveryStep[] = [];
    for (const call of pending) {
      const known = this.tools.get(call.toolId);
      if (!known && !filter && !opts.includeUnknownTools) continue;
      steps.push(await this.recoverOne(call, known, opts.dryRun === true));
    }
    return steps;
  }

  private async recoverOne(call: Call, tool: RuntimeTool | undefined, dryRun: boolean): Promise<RecoveryStep> {
    const effect = effectName(call.effectKind);
    const plan: RecoveryStep["plan"] =
      effect === "unsafe" ? "mark-indeterminate" : effect === "queryable" ? "ask-ledger-then-retry" : tool ? "retry-under-same-key" : "no-handler";
    const step: RecoveryStep = { callId: call.callId, toolId: call.toolId, effect, attempt: call.attempt, plan, result: "dry-run", detail: "" };
    if (dryRun) return step;
    if (plan === "no-handler") return { ...step, result: "skipped", detail: "no handler for this tool here; run recover where the tool's code is loaded" };
    try {
      // Without the tool's code only ask: a retry capability nobody runs would still move the call to its next attempt.
      const res = await this.kernel.resumeCall(call.callId, undefined, { lookupOnly: !tool });
      if (res.action === ResumeAction.RESUME_ACTION_ALREADY_COMPLETED) return { ...step, result: "already-completed" };
      if (res.action === ResumeAction.RESUME_ACTION_DONE) return { ...step, result: "done-in-ledger", detail: res.call?.outcomeDetail ?? "" };
      if (!tool || res.action === ResumeAction.RESUME_ACTION_LEFT_PENDING)
        return { ...step, result: "skipped", detail: "the ledger has no effect for it and no handler is loaded here to retry it" };
      const handle = this.kernel.handleFor(res.call, res.capability, res.capabilityExpiresAt);
      const output = (await tool.handler(JSON.parse(call.argumentsJson), handle)) ?? "";
      await handle.complete("succeeded", output);
      return { ...step, attempt: handle.attempt, result: "completed", detail: output };
    } catch (err) {
      const e = KeycapClientError.from(err);
      if (e.reason === "UNSAFE_NOT_RESUMABLE") return { ...step, result: "indeterminate", detail: "Unsafe: not retried; marked indeterminate for an operator" };
      // Listed by a pass that raced (or a crash that interrupted) its marking: already an operator's.
      if (e.reason === "CALL_INDETERMINATE") return { ...step, result: "indeterminate", detail: "already indeterminate: waiting for an operator" };
      return { ...step, result: "failed", detail: e.summary, error: { code: e.codeName, reason: e.reason } };
    }
  }

  private require(toolId: string): RuntimeTool {
    const t = this.tools.get(toolId);
    if (!t) throw new Error(`tool ${toolId} is not known to this runtime`);
    return t;
  }
}

function effectName(kind: EffectKind): RecoveryStep["effect"] {
  switch (kind) {
    case EffectKind.EFFECT_KIND_IDEMPOTENT:
      return "idempotent";
    case EffectKind.EFFECT_KIND_QUERYABLE:
      return "queryable";
    case EffectKind.EFFECT_KIND_UNSAFE:
      return "unsafe";
    default:
      return "unknown";
  }
}
