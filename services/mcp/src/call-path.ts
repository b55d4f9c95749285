/**
 * The governed call path (DESIGN §11): a host's tools/call of a governed tool is begun with
 * the kernel (which derives the key from the arguments as received and journals the call),
 * forwarded upstream once per slot, its CallToolResult stored under the slot and replayed to
 * every later call of it, and completed with the kernel.
 *
 * Per call, by the slot's record (result-store.ts): none → claim it and send; done → replay;
 * retryable → take it over and send again under the same key; sending under a live lease →
 * wait for that attempt (at most `waitMs`), then replay its result; sending under a lease that
 * ran out (the gateway that held it crashed) → an Idempotent call takes it over and sends
 * again under the same key, an Unsafe or Queryable one becomes indeterminate, never re-sent.
 *
 * A call of a replay or shadow run (its `_meta`'s mode, or the gateway's) is begun in that
 * mode and never sent: sandbox-call.ts answers it (ADR 0029).
 */
import { createHash, randomUUID } from "node:crypto";
import * as os from "node:os";
import canonicalize from "canonicalize";
import { ErrorCode, McpError, type CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import type { Call } from "../../../gen/ts/keycap/kernel/v1/kernel";
import { Reasons, type KernelClient } from "../../../clients/ts/src";
import type { Logger } from "../../common/src/logger";
import { fromKernelError, keycapMcpError, type KeycapErrorData } from "./call-errors";
import { ERROR_DOMAIN } from "../../common/src/errors";
import { traceCall, traceMeta } from "./call-tracing";
import type { GovernedTool } from "./governed-tools";
import type { CallOutcome, CallRecorder } from "./mcp-metrics";
import {
  META_CALL_ID,
  META_CAPABILITY,
  META_IDEMPOTENCY_KEY,
  META_ARGUMENTS_MISMATCH,
  META_NOT_SENT,
  META_RECORDED_AT,
  META_REPLAY,
  META_REQUEST_ID,
  META_RUN_ID,
} from "./meta-keys";
import type { Holder, ResultStore, SlotRecord } from "./result-store";
import type { Relay, Upstream } from "./upstream";
import { capabilityMode, LIVE, requestedRunMode, type RunModeRequest } from "./run-mode";
import { SandboxCalls, type SandboxCallOptions } from "./sandbox-call";
import type { ShadowRecorder } from "../../common/src/shadow-recorder";
import type { BeginOptions } from "../../../clients/ts/src";

export interface CallPathOptions {
  kernel: KernelClient;
  store: ResultStore;
  upstreams: ReadonlyMap<string, Upstream>;
  logger: Logger;
  /** How long an upstream tools/call may take before it counts as unanswered (ms); a lease lasts this plus 2 s. */
  timeoutMs: number;
  /** How long a call waits for a call of the same slot in flight before IN_PROGRESS (ms). */
  waitMs: number;
  /** The run id of calls whose `_meta` names none (ADR 0023). */
  defaultRunId?: string;
  /** How often a call waiting on another process's attempt reads the slot again (ms). Default 100. */
  pollMs?: number;
  /** Where each call's outcome is counted (KEYCAP_METRICS_LISTEN). */
  recorder?: CallRecorder;
  /** The run mode of calls whose `_meta` names none (KEYCAP_MCP_RUN_MODE, ADR 0029). Default live. */
  runMode?: RunModeRequest;
  /** Where shadow runs' would-be calls are recorded (the ledger's shadow store). */
  shadow: ShadowRecorder;
  /** The gateway's refusal store: its own refusals of sandbox calls are recorded there, against the tool. */
  refusals?: SandboxCallOptions["refusals"];
}

const LEASE_MARGIN_MS = 2_000;
/** Reasons of an answer that says "try again", not "no" (the kernel's gRPC code names when it sent no reason). */
const RETRYABLE_REASONS: ReadonlySet<string> = new Set([Reasons.UPSTREAM_UNAVAILABLE, Reasons.IN_PROGRESS, "UNAVAILABLE", "DEADLINE_EXCEEDED"]);
const MAX_ROUNDS = 8;

/** A begun call: the kernel's record and the capability for its one attempt. */
interface Begun {
  tool: GovernedTool;
  call: Call;
  capability: string;
  args: Record<string, unknown>;
  /** The host's progress callback: the call that sends relays the upstream's progress; waiters get none. */
  onProgress?: Relay["onProgress"];
}

export class CallPath {
  /** Attempts in flight in this process, by slot: local waiters await them instead of polling. */
  private readonly inFlight = new Map<string, Promise<void>>();
  /** This process, as the holder of the slots it claims. */
  private readonly holder: Holder = { host: os.hostname(), pid: process.pid, instance: randomUUID() };
  private readonly sandbox: SandboxCalls;

  constructor(private readonly opts: CallPathOptions) {
    this.sandbox = new SandboxCalls({
      store: opts.store,
      shadow: opts.shadow,
      ...(opts.refusals ? { refusals: opts.refusals } : {}),
      complete: (callId, outcome, detail) => this.complete(callId, outcome, detail),
    });
  }

  /** Answers one tools/call of a governed tool. Throws McpError for refusals (with keycap's reason). */
  async call(tool: GovernedTool, args: unknown, meta: Record<string, unknown> | undefined, relay: Relay = {}): Promise<CallToolResult> {
    const started = performance.now();
    return traceCall(tool.toolId, tool.name, meta, async (span) => {
      const record = (outcome: CallOutcome): void => {
        span.setAttribute("keycap.outcome", outcome);
        this.opts.recorder?.record(tool.toolId, outcome, (performance.now() - started) / 1000);
      };
      try {
        const result = await this.answer(tool, args, meta, relay);
        const m = result._meta ?? {};
        record(tool.policy.class === "read" ? "passed_through" : m[META_NOT_SENT] === true ? "not_sent" : m[META_REPLAY] === true ? "replayed" : "sent");
        return result;
      } catch (err) {
        const reason = err instanceof McpError ? (err.data as { reason?: unknown } | undefined)?.reason : undefined;
        if (typeof reason === "string") span.setAttribute("keycap.reason", reason);
        record(typeof reason !== "string" || RETRYABLE_REASONS.has(reason) ? "unavailable" : "refused");
        throw err;
      }
    });
  }

  private async answer(tool: GovernedTool, args: unknown, meta: Record<string, unknown> | undefined, relay: Relay): Promise<CallToolResult> {
    // A read call is the host's to cancel; a governed call runs to its result, which is stored for the key.
    if (tool.policy.class === "read") return this.passThrough(tool, args, relay);
    const runId = typeof meta?.[META_RUN_ID] === "string" ? meta[META_RUN_ID] : (this.opts.defaultRunId ?? "");
    const runMode = requestedRunMode(meta, this.opts.runMode ?? LIVE, tool.toolId);
    let begun: Begun;
    let recordedCallId: string | undefined;
    try {
      // The arguments as received: the kernel refuses what is not an object, a missing key field, … (and records it).
      const res = await this.opts.kernel.beginCall(tool.toolId, args === undefined ? "{}" : JSON.stringify(args), { runId, ...beginMode(runMode) });
      if (!res.call) throw new Error("the kernel answered BeginCall without a call");
      recordedCallId = res.recordedCall?.callId;
      begun = {
        tool,
        call: res.call,
        capability: res.capability,
        args: args as Record<string, unknown>,
        ...(relay.onProgress ? { onProgress: relay.onProgress } : {}),
      };
    } catch (err) {
      throw fromKernelError(err, tool.toolId);
    }
    // The capability's own mode too: a sandbox capability is never sent, whatever was asked.
    const sandbox = runMode.mode !== "live" ? runMode.mode : capabilityMode(begun.capability);
    if (sandbox) {
      const slot = tool.policy.class === "unsafe" ? undefined : slotOf(begun);
      return this.sandbox.answer({ ...begun, argumentsSha256: argumentsSha256(begun.args), slot, recordedCallId }, sandbox);
    }
    switch (tool.policy.class) {
      case "idempotent":
        return this.keyed(begun, slotOf(begun), "take-over");
      case "queryable":
        return this.keyed(begun, slotOf(begun), "indeterminate");
      case "unsafe":
        return this.unsafe(begun, runId);
    }
  }

  /** A `read` tool: sent as is, not journaled. */
  private async passThrough(tool: GovernedTool, args: unknown, relay: Relay): Promise<CallToolResult> {
    if (args !== undefined && !isObject(args)) {
      throw keycapMcpError(ErrorCode.InvalidParams, Reasons.ARGUMENTS_NOT_OBJECT, "tools/call arguments must be a JSON object", tool.toolId);
    }
    try {
      return await this.upstream(tool).callTool(tool.name, args ?? {}, traceMeta(), this.opts.timeoutMs, relay);
    } catch (err) {
      throw upstreamError(err, tool.toolId, "");
    }
  }

  /** Idempotent (slot = derived key) and Queryable (slot = request id): one send per slot, replayed after. */
  private async keyed(b: Begun, slot: string, onLostLease: "take-over" | "indeterminate"): Promise<CallToolResult> {
    const { store } = this.opts;
    const deadline = Date.now() + this.opts.waitMs;
    for (let round = 0; round < MAX_ROUNDS; round++) {
      // The insert decides who sends: tried first, so a new key costs one round trip.
      const seen = round === 0 ? undefined : await store.get(slot);
      if (!seen) {
        if (await store.claimNew(slot, b.tool.toolId, b.call.callId, this.leaseUntil(), this.holder, argumentsSha256(b.args))) return this.send(b, slot, 1);
        continue;
      }
      if (seen.state === "done") return this.replay(b, seen);
      if (seen.state === "indeterminate") {
        if (await this.indeterminateSettled(seen)) continue;
        return this.indeterminate(b, seen);
      }
      const lost = seen.state === "sending" && this.isLost(seen);
      if (seen.state === "retryable" || (lost && onLostLease === "take-over")) {
        if (await store.takeOver(seen, b.call.callId, this.leaseUntil(), this.holder)) {
          if (lost) this.supersede(seen, b.call.callId);
          this.opts.logger.info({ slot, tool: b.tool.toolId, attempt: seen.attempts + 1, after: seen.state }, "mcp: sending again under the same key");
          return this.send(b, slot, seen.attempts + 1);
        }
        continue;
      }
      if (lost) {
        await store.markIndeterminate(seen, "the gateway holding it stopped with the call in flight");
        continue;
      }
      const outcome = await this.waitFor(seen, deadline);
      if (outcome === "timeout") break;
      if (outcome.state === "retryable" && outcome.attempts === seen.attempts) {
        await this.complete(b.call.callId, "failed", "the attempt in flight got no answer from the upstream");
        throw keycapMcpError(
          ErrorCode.InternalError,
          Reasons.UPSTREAM_UNAVAILABLE,
          "the upstream did not answer the call in flight with these arguments; retry with the same arguments",
          b.tool.toolId,
        );
      }
    }
    await this.complete(b.call.callId, "failed", "not sent: a call with the same key was still in flight");
    throw keycapMcpError(
      ErrorCode.InternalError,
      Reasons.IN_PROGRESS,
      `a call with the same key is in flight and did not finish within ${this.opts.waitMs} ms; retry in a moment`,
      b.tool.toolId,
    );
  }

  /**
   * Unsafe: sent once per call. While it is in flight its slot (a fingerprint of tool, run and
   * arguments) exists, so an identical call then — typically a host's retry after a lost answer —
   * is not sent; after a crash the slot stays, and a retry learns an operator must settle it.
   */
  private async unsafe(b: Begun, runId: string): Promise<CallToolResult> {
    const { store } = this.opts;
    const slot = `unsafe:${fingerprint(b.tool.toolId, runId, b.args)}`;
    for (let round = 0; round < MAX_ROUNDS; round++) {
      if (await store.claimNew(slot, b.tool.toolId, b.call.callId, this.leaseUntil(), this.holder, argumentsSha256(b.args))) return this.send(b, slot, 1);
      const seen = await store.get(slot);
      if (!seen) continue;
      if (seen.state === "sending" && !this.isLost(seen)) {
        await this.complete(b.call.callId, "failed", `not sent: an identical Unsafe call (${seen.callId}) is in flight`);
        return toolError(
          `keycap: not sent. An identical call of this Unsafe tool (call ${seen.callId}) is in flight; an Unsafe call is never sent twice while its outcome is unknown. Retry once it has answered if you mean a second call.`,
          { [META_CALL_ID]: b.call.callId },
        );
      }
      // Settled by an operator since: the slot is free, and this call is a new one.
      if (await this.indeterminateSettled(seen)) continue;
      return this.indeterminate(b, seen);
    }
    throw keycapMcpError(ErrorCode.InternalError, Reasons.IN_PROGRESS, "the call's slot kept changing; retry in a moment", b.tool.toolId);
  }

  /** True (and the slot removed) when an operator has settled the indeterminate call that holds the slot. */
  private async indeterminateSettled(seen: SlotRecord): Promise<boolean> {
    const { store, kernel } = this.opts;
    if (seen.state !== "indeterminate") {
      await store.markIndeterminate(seen, "the gateway holding it stopped with the call in flight");
      return false;
    }
    const [pending, open] = await Promise.all([kernel.listPendingCalls(seen.toolId), kernel.listIndeterminateCalls(seen.toolId)]);
    if ([...pending, ...open].some((c) => c.callId === seen.callId)) return false;
    return store.remove(seen.slot, seen.attempts, "indeterminate");
  }

  private async indeterminate(b: Begun, seen: SlotRecord): Promise<CallToolResult> {
    await this.complete(b.call.callId, "failed", `not sent: call ${seen.callId} is indeterminate`);
    return toolError(
      `keycap: not sent. An earlier identical call of this tool (call ${seen.callId}) was sent and its outcome is unknown (the gateway stopped with it in flight, or the upstream did not answer in time); it is never sent again automatically. An operator must settle it: \`keycap recover\` marks it indeterminate, and \`keycap complete ${seen.callId} --outcome succeeded|failed\` settles it once you know what happened.`,
      { [META_CALL_ID]: b.call.callId, "io.keycap/indeterminate-call-id": seen.callId },
    );
  }

  private async send(b: Begun, slot: string, attempt: number): Promise<CallToolResult> {
    let done!: () => void;
    this.inFlight.set(slot, new Promise<void>((resolve) => (done = resolve)));
    try {
      return await this.exchange(b, slot, attempt);
    } finally {
      this.inFlight.delete(slot);
      done();
    }
  }

  private async exchange(b: Begun, slot: string, attempt: number): Promise<CallToolResult> {
    const { store } = this.opts;
    const { call, tool } = b;
    const meta: Record<string, unknown> = {
      ...traceMeta(),
      [META_CAPABILITY]: b.capability,
      [META_CALL_ID]: call.callId,
      ...(call.key ? { [META_IDEMPOTENCY_KEY]: call.key } : {}),
      ...(call.requestId ? { [META_REQUEST_ID]: call.requestId } : {}),
    };
    let result: CallToolResult;
    try {
      result = await this.upstream(tool).callTool(tool.name, b.args ?? {}, meta, this.opts.timeoutMs, b.onProgress ? { onProgress: b.onProgress } : {});
    } catch (err) {
      await this.failed(b, slot, attempt, err);
      throw upstreamError(err, tool.toolId, tool.policy.class === "idempotent" ? "; retry with the same arguments (the key stays retryable)" : "");
    }
    const isError = result.isError === true;
    let recordedAt: Date | undefined;
    if (tool.policy.class === "unsafe") await store.remove(slot, attempt, "sending");
    else recordedAt = await store.complete(slot, attempt, JSON.stringify(result), isError);
    await this.complete(call.callId, isError ? "failed" : "succeeded", isError ? "the tool answered isError: true" : "");
    return withMeta(result, {
      [META_REPLAY]: false,
      [META_CALL_ID]: call.callId,
      ...(call.key ? { [META_IDEMPOTENCY_KEY]: call.key } : {}),
      ...(recordedAt ? { [META_RECORDED_AT]: recordedAt.toISOString() } : {}),
    });
  }

  /** After an attempt got no CallToolResult: the key stays retryable; an Unsafe or Queryable call whose send may have arrived becomes indeterminate. */
  private async failed(b: Begun, slot: string, attempt: number, err: unknown): Promise<void> {
    const { store, logger } = this.opts;
    const why = err instanceof Error ? err.message : String(err);
    logger.warn({ slot, tool: b.tool.toolId, attempt, err: why }, "mcp: no result from the upstream");
    const refusal = upstreamRefusal(err);
    if (b.tool.policy.class === "idempotent") {
      await store.release(slot, attempt, why);
      await this.complete(
        b.call.callId,
        "failed",
        refusal ? `the upstream's keycap check refused the call: ${refusal.data.reason}` : `no result from the upstream: ${why}`,
      );
      return;
    }
    const mayHaveArrived = err instanceof McpError && (err.code === ErrorCode.RequestTimeout || err.code === ErrorCode.ConnectionClosed);
    if (mayHaveArrived) {
      // Left pending in the kernel: `keycap recover` marks it indeterminate for an operator.
      await store.markIndeterminate({ slot, toolId: b.tool.toolId, callId: b.call.callId, state: "sending", attempts: attempt, leaseUntil: new Date() }, why);
      return;
    }
    if (b.tool.policy.class === "unsafe") await store.remove(slot, attempt, "sending");
    else await store.release(slot, attempt, why);
    await this.complete(b.call.callId, "failed", `the upstream refused the request: ${why}`);
  }

  private async replay(b: Begun, seen: SlotRecord): Promise<CallToolResult> {
    if (seen.resultJson === undefined) throw new Error(`mcp slot ${seen.slot} is done without a result`);
    const result = JSON.parse(seen.resultJson) as CallToolResult;
    await this.complete(b.call.callId, result.isError === true ? "failed" : "succeeded", `replayed the stored result of call ${seen.callId}`);
    return withMeta(result, {
      [META_REPLAY]: true,
      // Dedupe is by key only (DESIGN §4): other arguments under the same key get the stored result, flagged.
      ...(seen.argumentsSha256 !== undefined && seen.argumentsSha256 !== argumentsSha256(b.args) ? { [META_ARGUMENTS_MISMATCH]: true } : {}),
      [META_CALL_ID]: b.call.callId,
      ...(b.call.key ? { [META_IDEMPOTENCY_KEY]: b.call.key } : {}),
      ...(seen.recordedAt ? { [META_RECORDED_AT]: seen.recordedAt.toISOString() } : {}),
    });
  }

  /** The crashed attempt's kernel call is settled as superseded by the one that took its key over. */
  private supersede(seen: SlotRecord, by: string): void {
    void this.complete(seen.callId, "failed", `superseded: the gateway stopped with it in flight; call ${by} sent again under the same key`);
  }

  private async complete(callId: string, outcome: "succeeded" | "failed", detail: string): Promise<void> {
    try {
      await this.opts.kernel.completeCall(callId, outcome, detail);
    } catch (err) {
      // The answer stands (the effect happened or was refused); the call stays pending for `keycap recover`.
      this.opts.logger.warn({ call: callId, err: err instanceof Error ? err.message : String(err) }, "mcp: CompleteCall failed; the call stays pending");
    }
  }

  private upstream(tool: GovernedTool): Upstream {
    const u = this.opts.upstreams.get(tool.upstream);
    if (!u) throw new Error(`no upstream ${tool.upstream}`);
    return u;
  }

  private leaseUntil(): Date {
    return new Date(Date.now() + this.opts.timeoutMs + LEASE_MARGIN_MS);
  }

  /** Waits until the attempt `seen` ends (or its lease runs out); "timeout" past the deadline. */
  private async waitFor(seen: SlotRecord, deadline: number): Promise<SlotRecord | "timeout"> {
    for (;;) {
      const remaining = deadline - Date.now();
      if (remaining <= 0) return "timeout";
      const local = this.inFlight.get(seen.slot);
      await Promise.race([local ?? sleep(Math.min(this.opts.pollMs ?? 100, remaining)), sleep(remaining)]);
      const now = await this.opts.store.get(seen.slot);
      if (!now) return "timeout";
      if (now.attempts !== seen.attempts || now.state !== "sending") return now;
      if (this.isLost(now)) return now;
    }
  }

  /**
   * Whether the attempt holding a sending slot is gone: its lease ran out, or it was held by a
   * process on this host that is no longer running (a gateway killed and restarted — the
   * stdio case — so the host's retry need not wait the lease out).
   */
  private isLost(seen: SlotRecord): boolean {
    if (seen.leaseUntil.getTime() <= Date.now()) return true;
    const h = seen.holder;
    if (!h || h.host !== this.holder.host) return false;
    // This process's own slots end by their attempt's outcome (or, failing that, the lease).
    if (h.instance === this.holder.instance) return false;
    return h.pid === this.holder.pid || !isRunning(h.pid);
  }
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it runs, as another user.
    return (err as { code?: string }).code === "EPERM";
  }
}

/** An Idempotent call's slot is its derived key; a Queryable call's, its request id. */
function slotOf(b: Begun): string {
  return b.tool.policy.class === "idempotent" ? `key:${b.call.key}` : `request:${b.tool.toolId}:${b.call.requestId}`;
}

/** BeginCall's mode options: the recorded run only for a replay, the shadowed run only for a shadow. */
function beginMode(r: RunModeRequest): Pick<BeginOptions, "mode" | "replayOf" | "shadows"> {
  if (r.mode === "replay") return { mode: "replay", ...(r.replayOf !== undefined ? { replayOf: r.replayOf } : {}) };
  if (r.mode === "shadow") return { mode: "shadow", ...(r.shadows !== undefined ? { shadows: r.shadows } : {}) };
  return {};
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** SHA-256 (base64url) of the canonical arguments (RFC 8785). */
function argumentsSha256(args: Record<string, unknown> | undefined): string {
  return createHash("sha256")
    .update(canonicalize(args ?? {}) ?? "")
    .digest("base64url");
}

/** SHA-256 of tool, run and canonical arguments (RFC 8785): identical Unsafe calls share it. */
function fingerprint(toolId: string, runId: string, args: Record<string, unknown>): string {
  return createHash("sha256")
    .update(toolId)
    .update("\0")
    .update(runId)
    .update("\0")
    .update(canonicalize(args ?? {}) ?? "")
    .digest("base64url");
}

function withMeta(result: CallToolResult, meta: Record<string, unknown>): CallToolResult {
  return { ...result, _meta: { ...(result._meta ?? {}), ...meta } };
}

/** The gateway's own tool error: nothing was sent upstream. */
function toolError(text: string, meta: Record<string, unknown>): CallToolResult {
  return { content: [{ type: "text", text }], isError: true, _meta: { ...meta, [META_NOT_SENT]: true } };
}

function upstreamError(err: unknown, toolId: string, advice: string): McpError {
  const refusal = upstreamRefusal(err);
  if (refusal) {
    // A keycap-aware server refused before its handler ran (issue 29): the host sees the
    // server's own reason, and nothing took effect, so the call is as retryable as ever.
    const { code, data, message } = refusal;
    return keycapMcpError(code, data.reason, `the upstream's keycap check refused the call: ${message}`, toolId, { ...data.metadata, refused_by: "upstream" });
  }
  const why = err instanceof Error ? err.message : String(err);
  return keycapMcpError(ErrorCode.InternalError, Reasons.UPSTREAM_UNAVAILABLE, `no result from the upstream (${why})${advice}`, toolId);
}

/** The refusal of a keycap-aware MCP server (its error carries keycap's reason in `data`), if `err` is one. */
function upstreamRefusal(err: unknown): { code: ErrorCode; data: KeycapErrorData; message: string } | undefined {
  if (!(err instanceof McpError) || (err.code !== ErrorCode.InvalidParams && err.code !== ErrorCode.InternalError)) return undefined;
  const data = err.data as Partial<KeycapErrorData> | undefined;
  if (typeof data !== "object" || data === null || data.domain !== ERROR_DOMAIN || typeof data.reason !== "string") return undefined;
  const metadata: Record<string, string> = {};
  for (const [k, v] of Object.entries(data.metadata ?? {})) if (typeof v === "string") metadata[k] = v;
  return {
    code: err.code,
    data: { reason: data.reason, domain: ERROR_DOMAIN, tool_id: typeof data.tool_id === "string" ? data.tool_id : "", metadata },
    message: err.message,
  };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
