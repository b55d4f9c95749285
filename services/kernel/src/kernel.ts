import { randomUUID } from "node:crypto";
import type { CompletionReceipt } from "../../common/src/domain/completion-receipt";
import type { Metrics } from "../../common/src/metrics";
import { SummarizedWarning } from "../../common/src/summarized-warning";
import type { DerivationClaim } from "../../capability/src";
import type { Logger } from "../../common/src/logger";
import { decodePageToken, encodePageToken, pageSize } from "../../common/src/paging";
import type { CallCriterion, CallJournal, CallOutcomeName, CallRecord, JournalCursor, PendingPage } from "./call-journal";
import type { CapabilityMinter, MintedCapability } from "./capability-minter";
import { deriveKey, derivationClaim, readRequestId } from "../../common/src/domain/key-derivation";
import { parseArguments, type JsonLimits, type ParsedArguments } from "../../common/src/domain/strict-json";
import type { AccessPolicy } from "./access-policy";
import type { Caller } from "./caller-auth";
import type { LedgerLookup } from "./ledger-lookup";
import type { SigningKeys } from "./signing-keys";
import { checkToolId, type CompiledTool } from "./tool-definition";
import type { ToolRegistry } from "./tool-registry";
import { Reasons, refuse } from "../../common/src/refuse";
import type { ReplayMatch, ReplayMatcher } from "./replay-matcher";
import { checkRunMode, derivationRunId, sandboxModeOf, type RunModeInput } from "./run-mode";

export interface KernelDeps {
  registry: ToolRegistry;
  journal: CallJournal;
  minter: CapabilityMinter;
  keys: SigningKeys;
  ledger: LedgerLookup;
  limits: JsonLimits;
  logger: Logger;
  access: AccessPolicy;
  replay: ReplayMatcher;
  /** Counters; undefined: not recorded. */
  metrics?: Metrics | undefined;
}

/** BeginCall's input: the call as the runtime recorded it, and its run mode (ADR 0028). */
export interface BeginCallInput extends RunModeInput {
  toolId: string;
  /** The runtime's own call id, or "" for one the kernel picks. */
  callId: string;
  runId: string;
  argumentsJson: string;
}

/** A begun call: its journal record and the capability of its current attempt. */
export interface BegunCall {
  call: CallRecord;
  capability: MintedCapability;
  /** The call id was begun before: the same call and the same capability grant. */
  existing: boolean;
  /** Replay: the recorded call this call matched, with its outcome. */
  recorded?: CallRecord;
}

/** One call of a run and its position among the run's journaled calls. */
export interface RunCall {
  position: number;
  call: CallRecord;
}

/** CompleteCall's input. */
export interface CompleteCallInput {
  callId: string;
  outcome: CallOutcomeName;
  outcomeDetail: string;
}

/** ResumeCall's input. */
export interface ResumeCallInput {
  callId: string;
  /** Only find out whether the call is done; never move it to its next attempt. */
  lookupOnly: boolean;
}

/** What recovery decided for a call. */
export type ResumeOutcome =
  { action: "already_completed" | "done" | "left_pending"; call: CallRecord } | { action: "retry"; call: CallRecord; capability: MintedCapability };

/** One page of a listing and the token of the next ("" at the end). */
export interface Page<T> {
  items: T[];
  nextPageToken: string;
}

/** A paged listing's input. */
export interface PageRequest {
  pageSize: number;
  pageToken: string;
}

/**
 * The kernel's behaviour, independent of transport and of the wire's types (kernel-proto.ts
 * maps them, kernel-grpc.ts binds grpc-js): the only place keys are derived and capabilities
 * minted.
 */
export class Kernel {
  /** Receipts that do not verify can come with every BeginCalls of a misconfigured client: summed, not one line each. */
  private readonly invalidReceipts: SummarizedWarning;

  constructor(private readonly d: KernelDeps) {
    this.invalidReceipts = new SummarizedWarning(
      d.logger,
      "completion receipts that do not verify were ignored: another deployment's (its kernel and ledger on another database) or altered; those calls are settled by reading their entries",
    );
  }

  /**
   * Signs with newly loaded keys from now on (SIGHUP after `keycap keys rotate`).
   * Retired keys stay in the published JWKS for their grace period, so capabilities
   * minted before the switch keep verifying: rotation without downtime.
   */
  useSigningKeys(keys: SigningKeys, minter: CapabilityMinter): void {
    this.d.keys = keys;
    this.d.minter = minter;
  }

  /**
   * @param compile the definition, compiled only once the caller is known to be a runtime: a
   *   caller that may not register is told so, not what is wrong with its definition.
   */
  async registerTool(compile: () => CompiledTool, caller: Caller): Promise<{ tool: CompiledTool; alreadyRegistered: boolean }> {
    this.d.access.requireRuntime(caller, "RegisterTool");
    const compiled = compile();
    const { tool, alreadyRegistered } = await this.d.registry.register(compiled, caller.name, (existing) => this.d.access.requireRegistrable(caller, existing));
    if (!alreadyRegistered) this.d.logger.info({ tool_id: tool.definition.toolId, effect: tool.definition.effect.kind, owner: caller.name }, "tool registered");
    return { tool, alreadyRegistered };
  }

  /** A runtime reads only tools it owns or is granted; operators read any (issue 32). */
  async getTool(toolId: string, caller: Caller): Promise<CompiledTool> {
    checkToolId(toolId, "tool_id");
    const tool = await this.d.registry.require(toolId);
    await this.d.access.requireTool(caller, tool, "read", { operatorsToo: true });
    return tool;
  }

  /** Ordered by tool id; a runtime sees only the tools it owns or is granted, operators all. */
  async listTools(req: PageRequest, caller: Caller): Promise<Page<CompiledTool>> {
    const limit = pageSize(req.pageSize);
    const cursor = decodePageToken(req.pageToken, { after: "id" });
    const visible = await this.d.access.visibleTools(caller);
    const after = cursor ? cursor.after : "";
    const tools = visible
      ? await this.d.registry.listOf(
          visible.filter((id) => id > after),
          limit + 1,
        )
      : await this.d.registry.list(after, limit + 1);
    const page = tools.slice(0, limit);
    const last = page[page.length - 1];
    return {
      items: page,
      nextPageToken: tools.length > limit && last ? encodePageToken({ after: last.definition.toolId }) : "",
    };
  }

  /**
   * Completion receipts a runtime forwarded with its BeginCalls (ADR 0035). Never a refusal:
   * a receipt that does not verify is ignored (its call is settled by reading its entry),
   * counted, and logged without its content, summed at most once a minute.
   */
  acceptReceipts(receipts: readonly CompletionReceipt[]): void {
    if (receipts.length === 0) return;
    const tally = this.d.journal.acceptReceipts(receipts);
    for (const result of ["settles", "unknown", "invalid"] as const) this.d.metrics?.completionReceipts(result, tally[result]);
    this.invalidReceipts.add(tally.invalid);
  }

  async beginCall(req: BeginCallInput, caller: Caller): Promise<BegunCall> {
    this.d.access.requireRuntime(caller, "BeginCall");
    // call_id, run_id and the run ids' lengths are rules of BeginCallRequest (kernel.proto),
    // checked as the request is decoded (a batch's items one by one).
    checkToolId(req.toolId, "tool_id");
    checkRunMode(req);
    const tool = await this.d.registry.require(req.toolId);
    await this.d.access.requireTool(caller, tool, "begin calls of", { operatorsToo: false, ...(req.callId ? { callId: req.callId } : {}) });
    // Everything that can refuse the call happens before anything is journaled.
    const args = parseArguments(req.argumentsJson, this.d.limits);
    tool.schema?.validate(args.value);
    const identity = this.identify(tool, args, derivationRunId(req));
    const callId = req.callId || randomUUID();
    const replayCall = { runId: req.runId, replayOfRunId: req.replayOfRunId, callId, toolId: tool.definition.toolId, ...identity };
    if (req.mode !== "live" && tool.definition.effect.kind === "unsafe") {
      throw req.mode === "replay"
        ? await this.d.replay.denyUnsafe(replayCall)
        : refuse(Reasons.SANDBOX_UNSAFE_DENIED, `tool ${req.toolId} is Unsafe: it is denied outright in a shadow run`, { mode: "shadow" });
    }
    const replay = req.mode === "replay" ? await this.d.replay.match(replayCall) : undefined;
    const mode = sandboxModeOf(req.mode);
    const minted = await this.d.minter.mint({
      principal: caller.name,
      toolId: tool.definition.toolId,
      effect: tool.definition.effect.kind,
      callId,
      attempt: 1,
      ...identity,
      ...(mode ? { mode } : {}),
    });
    const record = callRecord(req, tool, callId, identity, minted, caller, replay);
    const { call, existing } = await this.d.journal.begin(record);
    // A repeated BeginCall returns the same call and the same capability (same jti;
    // Ed25519 is deterministic, so the same token while it has time left, renewed once
    // it has not): an Unsafe call cannot gain a second single-use capability by
    // beginning again, and a late retry never gets an already-expired one.
    const capability = existing ? await this.d.minter.mintWithClaims(this.d.minter.renewed(call.capability)) : minted;
    return { call, capability, existing, ...(replay ? { recorded: replay.recorded } : {}) };
  }

  /**
   * One run's calls in the order they were begun, each with its position among the run's
   * journaled calls; a runtime sees only the calls of tools it owns or is granted (gaps in
   * the positions), an operator all (ADR 0028).
   */
  async listRunCalls(req: PageRequest & { runId: string }, caller: Caller): Promise<Page<RunCall>> {
    const limit = pageSize(req.pageSize);
    const skip = decodePageToken(req.pageToken, { p: "time" })?.p ?? 0;
    const [found, visible] = await Promise.all([this.d.journal.listRun(req.runId, skip, limit + 1, { operator: true }), this.d.access.visibleTools(caller)]);
    const seen = visible ? new Set(visible) : undefined;
    const items = found
      .slice(0, limit)
      .map((call, i) => ({ position: skip + i, call }))
      .filter((c) => !seen || seen.has(c.call.tool_id));
    return { items, nextPageToken: found.length > limit ? encodePageToken({ p: skip + limit }) : "" };
  }

  async completeCall(req: CompleteCallInput, caller: Caller): Promise<{ call: CallRecord; alreadyCompleted: boolean }> {
    const outcome = req.outcome;
    const { call, alreadyCompleted } = await this.d.journal.complete(req.callId, outcome, req.outcomeDetail, {
      by: caller.name,
      mayComplete: async (c) => {
        const tool = await this.d.registry.require(c.tool_id);
        await this.d.access.requireTool(caller, tool, "complete calls of", { operatorsToo: true, callId: c._id });
      },
    });
    return { call, alreadyCompleted };
  }

  /**
   * One call for its story (ADR 0032): operators read any; a runtime reads the calls of tools
   * it owns or is granted, and is refused TOOL_NOT_GRANTED (naming the grant to ask for) for
   * the others, as ResumeCall is. An id the journal does not hold is CALL_NOT_FOUND to anyone.
   */
  async getCall(callId: string, caller: Caller): Promise<CallRecord> {
    // The id's form is a rule of GetCallRequest (kernel.proto), checked at the edge.
    const call = await this.d.journal.read(callId);
    if (!call) throw refuse(Reasons.CALL_NOT_FOUND, `call ${JSON.stringify(callId)} is not in the journal`, { call_id: callId });
    await this.d.access.requireTool(caller, await this.d.registry.require(call.tool_id), "read calls of", { operatorsToo: true, callId });
    return call;
  }

  /** Calls by one indexed field, newest first; a runtime finds only calls of tools it owns or is granted. */
  async searchCalls(req: PageRequest & { criterion?: CallCriterion }, caller: Caller): Promise<Page<CallRecord>> {
    if (!req.criterion || req.criterion.value === "") {
      throw refuse(Reasons.SELECTOR_REQUIRED, "one of call_id, run_id, key or principal is required", { field: "criterion" });
    }
    const cursor = decodePageToken(req.pageToken, { t: "time", i: "id" });
    const visible = await this.d.access.visibleTools(caller);
    const page = await this.d.journal.search(req.criterion, visible, cursor ? { createdAt: cursor.t, id: cursor.i } : undefined, pageSize(req.pageSize));
    return { items: page.calls, nextPageToken: page.next ? encodePageToken({ t: page.next.createdAt, i: page.next.id }) : "" };
  }

  listPendingCalls(req: PageRequest & { toolId: string }, caller: Caller): Promise<Page<CallRecord>> {
    return this.listCalls(req, caller, (toolId, after, limit) => this.d.journal.listPending(toolId, after, limit));
  }

  listIndeterminateCalls(req: PageRequest & { toolId: string }, caller: Caller): Promise<Page<CallRecord>> {
    return this.listCalls(req, caller, (toolId, after, limit) => this.d.journal.listIndeterminate(toolId, after, limit));
  }

  /** One page of a journal listing, with the page token scheme both listings share. */
  private async listCalls(
    req: { toolId: string; pageSize: number; pageToken: string },
    caller: Caller,
    list: (toolId: string | readonly string[], after: JournalCursor | undefined, limit: number) => Promise<PendingPage>,
  ): Promise<Page<CallRecord>> {
    let tools: string | readonly string[] = req.toolId;
    if (req.toolId) {
      checkToolId(req.toolId, "tool_id");
      await this.d.access.requireTool(caller, await this.d.registry.require(req.toolId), "list calls of", { operatorsToo: true });
    } else {
      tools = (await this.d.access.visibleTools(caller)) ?? "";
    }
    const cursor = decodePageToken(req.pageToken, { t: "time", i: "id" });
    const page = await list(tools, cursor ? { createdAt: cursor.t, id: cursor.i } : undefined, pageSize(req.pageSize));
    return {
      items: page.calls,
      nextPageToken: page.next ? encodePageToken({ t: page.next.createdAt, i: page.next.id }) : "",
    };
  }

  /**
   * The recovery path. Idempotent: the key is re-derived from the recorded
   * arguments (never copied from the journal) and must equal the journaled
   * one; the next attempt gets a fresh capability under the same key.
   * Queryable: the ledger is asked; done → completed, else retry. Unsafe:
   * refused, and the call is marked indeterminate for an operator.
   */
  async resumeCall(req: ResumeCallInput, caller: Caller): Promise<ResumeOutcome> {
    this.d.access.requireRuntime(caller, "ResumeCall");
    const call = await this.d.journal.require(req.callId);
    await this.d.access.requireTool(caller, await this.d.registry.require(call.tool_id), "resume calls of", { operatorsToo: false, callId: call._id });
    if (call.state === "completed") {
      return { action: "already_completed", call };
    }
    if (call.state === "indeterminate") {
      throw refuse(Reasons.CALL_INDETERMINATE, `call ${call._id} is indeterminate: whether it took effect is unknown; an operator must complete it`, {
        call_id: call._id,
      });
    }
    const tool = await this.d.registry.require(call.tool_id);
    switch (tool.definition.effect.kind) {
      case "unsafe": {
        const message = `call ${call._id} of Unsafe tool ${call.tool_id} is never retried automatically; it is now indeterminate and needs an operator`;
        await this.d.journal.markIndeterminate(call._id, "UNSAFE_NOT_RESUMABLE", message, caller.name);
        this.d.logger.warn({ call_id: call._id, tool_id: call.tool_id }, "unsafe call marked indeterminate at recovery");
        throw refuse(Reasons.UNSAFE_NOT_RESUMABLE, message, { call_id: call._id, tool_id: call.tool_id });
      }
      case "idempotent": {
        if (req.lookupOnly) return { action: "left_pending", call };
        return this.retry(call, tool, await this.rederive(tool, call, caller), caller);
      }
      case "queryable": {
        const requestId = call.request_id ?? "";
        const probe = await this.d.minter.mint({
          principal: call.principal ?? caller.name,
          toolId: call.tool_id,
          effect: "queryable",
          callId: call._id,
          attempt: call.attempt,
          requestId,
          ...modeOf(call),
        });
        const { found, entryId } = await this.d.ledger.lookup(requestId, probe.token);
        if (found) {
          const { call: done } = await this.d.journal.complete(call._id, "succeeded", `recovery: the ledger holds request ${requestId} (entry ${entryId})`, {
            by: caller.name,
          });
          return { action: "done", call: done };
        }
        // Minting the retry capability moves the call to its next attempt; a caller that
        // cannot run the retry would use one up on every pass.
        if (req.lookupOnly) return { action: "left_pending", call };
        return this.retry(call, tool, { requestId }, caller);
      }
    }
  }

  /** The published keys (JWKS) and the id of the one signing now. */
  getSigningKeys(): { jwksJson: string; currentKeyId: string } {
    return { jwksJson: JSON.stringify(this.d.keys.publicJwks()), currentKeyId: this.d.keys.currentKid };
  }

  private identify(tool: CompiledTool, args: ParsedArguments, runId: string): { key?: string; requestId?: string; derivation?: DerivationClaim } {
    const e = tool.definition.effect;
    if (e.kind === "idempotent") return { key: deriveKey(tool.definition.toolId, e.key, args, { runId }), derivation: derivationClaim(e.key, { runId }) };
    if (e.kind === "queryable") return { requestId: readRequestId(args, e.requestIdField) };
    return {};
  }

  private async rederive(tool: CompiledTool, call: CallRecord, caller: Caller): Promise<{ key: string; derivation?: DerivationClaim }> {
    let identity: { key?: string; derivation?: DerivationClaim } = {};
    let problem = "";
    try {
      identity = this.identify(tool, parseArguments(call.arguments_json, this.d.limits), call.replay_of_run_id ?? call.run_id);
    } catch (err) {
      problem = err instanceof Error ? err.message : String(err);
    }
    const key = identity.key;
    if (key !== undefined && key === call.key) return { key, ...(identity.derivation ? { derivation: identity.derivation } : {}) };
    const message =
      `call ${call._id}: the key re-derived from the recorded arguments ` +
      (key === undefined ? `could not be computed (${problem})` : "differs from the journaled key") +
      "; the call is not retried under another key";
    await this.d.journal.recordResumeRefusal(call._id, "KEY_REDERIVATION_MISMATCH", message, caller.name);
    this.d.logger.error({ call_id: call._id, tool_id: call.tool_id }, "key re-derivation mismatch at recovery");
    throw refuse(Reasons.KEY_REDERIVATION_MISMATCH, message, { call_id: call._id, tool_id: call.tool_id });
  }

  private async retry(
    call: CallRecord,
    tool: CompiledTool,
    identity: { key?: string; requestId?: string; derivation?: DerivationClaim },
    caller: Caller,
  ): Promise<ResumeOutcome> {
    // The capability names the principal that began the call, whoever resumes it.
    const minted: MintedCapability = await this.d.minter.mint({
      principal: call.principal ?? call.capability.sub ?? "unknown",
      toolId: call.tool_id,
      effect: tool.definition.effect.kind,
      callId: call._id,
      attempt: call.attempt + 1,
      ...identity,
      ...modeOf(call),
    });
    const advanced = await this.d.journal.advanceAttempt(call, minted.claims, caller.name);
    this.d.logger.info({ call_id: call._id, tool_id: call.tool_id, attempt: advanced.attempt }, "call resumed");
    return { action: "retry", call: advanced, capability: minted };
  }
}

/** The journal record of a call about to be begun. */
function callRecord(
  req: BeginCallInput,
  tool: CompiledTool,
  callId: string,
  identity: { key?: string; requestId?: string },
  minted: MintedCapability,
  caller: Caller,
  replay: ReplayMatch | undefined,
): CallRecord {
  const now = new Date();
  const mode = sandboxModeOf(req.mode);
  return {
    _id: callId,
    tool_id: tool.definition.toolId,
    run_id: req.runId,
    arguments_json: req.argumentsJson,
    effect: tool.definition.effect.kind,
    ...(identity.key !== undefined ? { key: identity.key } : {}),
    ...(identity.requestId !== undefined ? { request_id: identity.requestId } : {}),
    attempt: 1,
    state: "pending",
    capability: minted.claims,
    created_at: now,
    updated_at: now,
    principal: caller.name,
    ...(mode ? { mode } : {}),
    ...(replay ? { replay_of_run_id: req.replayOfRunId, replay_of_call_id: replay.recorded._id, replay_position: replay.position } : {}),
    ...(req.shadowsRunId ? { shadows_run_id: req.shadowsRunId } : {}),
  };
}

/** The `mode` a call's capabilities carry (none when live). */
function modeOf(call: CallRecord): { mode?: "shadow" | "replay" } {
  return call.mode ? { mode: call.mode } : {};
}
