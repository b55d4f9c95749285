import { randomUUID } from "node:crypto";
import {
  CallOutcome,
  CallState,
  ResumeAction,
  type BeginCallRequest,
  type BeginCallResponse,
  type BeginCallsRequest,
  type BeginCallsResponse,
  type Call,
  type CompleteCallRequest,
  type CompleteCallResponse,
  type CompleteCallsRequest,
  type CompleteCallsResponse,
  type GetSigningKeysResponse,
  type GetToolRequest,
  type GetToolResponse,
  type KernelServiceServer,
  type ListIndeterminateCallsRequest,
  type ListIndeterminateCallsResponse,
  type ListPendingCallsRequest,
  type ListPendingCallsResponse,
  type ListToolsRequest,
  type ListToolsResponse,
  type RegisterToolRequest,
  type RegisterToolResponse,
  type ResumeCallRequest,
  type ResumeCallResponse,
} from "../../../gen/ts/keycap/kernel/v1/kernel";
import type { CapabilityClaims, DerivationClaim } from "../../capability/src";
import { effectKindOf } from "../../common/src/effect-kind";
import type { Logger } from "../../common/src/logger";
import { decodePageToken, encodePageToken, pageSize } from "../../common/src/paging";
import type { CallJournal, CallOutcomeName, CallRecord, JournalCursor, PendingPage } from "./call-journal";
import type { CapabilityMinter, MintedCapability } from "./capability-minter";
import { deriveKey, derivationClaim, readRequestId } from "../../common/src/domain/key-derivation";
import { parseArguments, type JsonLimits, type ParsedArguments } from "../../common/src/domain/strict-json";
import type { AccessPolicy } from "./access-policy";
import type { Caller } from "./caller-auth";
import { kernelBatchHandler, kernelHandler, type KernelEdge } from "./kernel-handlers";
import type { LedgerLookup } from "./ledger-lookup";
import type { SigningKeys } from "./signing-keys";
import { checkToolId, definitionFromProto, toolToProto, type CompiledTool } from "./tool-definition";
import type { ToolRegistry } from "./tool-registry";
import { Reasons, refuse } from "../../common/src/refuse";

export interface KernelDeps {
  registry: ToolRegistry;
  journal: CallJournal;
  minter: CapabilityMinter;
  keys: SigningKeys;
  ledger: LedgerLookup;
  limits: JsonLimits;
  logger: Logger;
  access: AccessPolicy;
}

const CALL_ID = /^[A-Za-z0-9._:-]{1,128}$/;
const MAX_RUN_ID = 256;
const MAX_OUTCOME_DETAIL = 4096;

/**
 * The kernel's behaviour, independent of transport: the only place keys are
 * derived and capabilities minted.
 */
export class Kernel {
  constructor(private readonly d: KernelDeps) {}

  /**
   * Signs with newly loaded keys from now on (SIGHUP after `keycap keys rotate`).
   * Retired keys stay in the published JWKS for their grace period, so capabilities
   * minted before the switch keep verifying: rotation without downtime.
   */
  useSigningKeys(keys: SigningKeys, minter: CapabilityMinter): void {
    this.d.keys = keys;
    this.d.minter = minter;
  }

  async registerTool(req: RegisterToolRequest, caller: Caller): Promise<RegisterToolResponse> {
    this.d.access.requireRuntime(caller, "RegisterTool");
    const compiled = definitionFromProto(req.tool);
    const { tool, alreadyRegistered } = await this.d.registry.register(compiled, caller.name, (existing) => this.d.access.requireRegistrable(caller, existing));
    if (!alreadyRegistered) this.d.logger.info({ tool_id: tool.definition.toolId, effect: tool.definition.effect.kind, owner: caller.name }, "tool registered");
    return { tool: toolToProto(tool), alreadyRegistered };
  }

  /** A runtime reads only tools it owns or is granted; operators read any (issue 32). */
  async getTool(req: GetToolRequest, caller: Caller): Promise<GetToolResponse> {
    checkToolId(req.toolId, "tool_id");
    const tool = await this.d.registry.require(req.toolId);
    await this.d.access.requireTool(caller, tool, "read", { operatorsToo: true });
    return { tool: toolToProto(tool) };
  }

  /** Ordered by tool id; a runtime sees only the tools it owns or is granted, operators all. */
  async listTools(req: ListToolsRequest, caller: Caller): Promise<ListToolsResponse> {
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
      tools: page.map(toolToProto),
      nextPageToken: tools.length > limit && last ? encodePageToken({ after: last.definition.toolId }) : "",
    };
  }

  async beginCall(req: BeginCallRequest, caller: Caller): Promise<BeginCallResponse> {
    this.d.access.requireRuntime(caller, "BeginCall");
    checkToolId(req.toolId, "tool_id");
    if (req.callId !== "" && !CALL_ID.test(req.callId)) {
      throw refuse(Reasons.INVALID_CALL_ID, `call_id must be 1-128 characters of [A-Za-z0-9._:-], got ${JSON.stringify(req.callId)}`, { field: "call_id" });
    }
    if ([...req.runId].length > MAX_RUN_ID) {
      throw refuse(Reasons.INVALID_RUN_ID, `run_id must be at most ${MAX_RUN_ID} characters`, { field: "run_id" });
    }
    const tool = await this.d.registry.require(req.toolId);
    await this.d.access.requireTool(caller, tool, "begin calls of", { operatorsToo: false, ...(req.callId ? { callId: req.callId } : {}) });
    // Everything that can refuse the call happens before anything is journaled.
    const args = parseArguments(req.argumentsJson, this.d.limits);
    tool.schema?.validate(args.value);
    const identity = this.identify(tool, args, req.runId);

    const callId = req.callId || randomUUID();
    const minted = await this.d.minter.mint({
      principal: caller.name,
      toolId: tool.definition.toolId,
      effect: tool.definition.effect.kind,
      callId,
      attempt: 1,
      ...identity,
    });
    const now = new Date();
    const record: CallRecord = {
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
    };
    const { call, existing } = await this.d.journal.begin(record);
    // A repeated BeginCall returns the same call and the same capability (same jti;
    // Ed25519 is deterministic, so the same token while it has time left, renewed once
    // it has not): an Unsafe call cannot gain a second single-use capability by
    // beginning again, and a late retry never gets an already-expired one.
    const capability = existing ? await this.d.minter.mintWithClaims(this.d.minter.renewed(call.capability)) : minted;
    return { call: callToProto(call), capability: capability.token, capabilityExpiresAt: capability.expiresAt, existingCall: existing };
  }

  async completeCall(req: CompleteCallRequest, caller: Caller): Promise<CompleteCallResponse> {
    const outcome = outcomeName(req.outcome);
    if (req.outcomeDetail.length > MAX_OUTCOME_DETAIL) {
      throw refuse(Reasons.OUTCOME_DETAIL_TOO_LONG, `outcome_detail must be at most ${MAX_OUTCOME_DETAIL} characters`, { field: "outcome_detail" });
    }
    requireCallId(req.callId);
    const { call, alreadyCompleted } = await this.d.journal.complete(req.callId, outcome, req.outcomeDetail, async (c) => {
      const tool = await this.d.registry.require(c.tool_id);
      await this.d.access.requireTool(caller, tool, "complete calls of", { operatorsToo: true, callId: c._id });
    });
    return { call: callToProto(call), alreadyCompleted };
  }

  listPendingCalls(req: ListPendingCallsRequest, caller: Caller): Promise<ListPendingCallsResponse> {
    return this.listCalls(req, caller, (toolId, after, limit) => this.d.journal.listPending(toolId, after, limit));
  }

  listIndeterminateCalls(req: ListIndeterminateCallsRequest, caller: Caller): Promise<ListIndeterminateCallsResponse> {
    return this.listCalls(req, caller, (toolId, after, limit) => this.d.journal.listIndeterminate(toolId, after, limit));
  }

  /** One page of a journal listing, with the page token scheme both listings share. */
  private async listCalls(
    req: { toolId: string; pageSize: number; pageToken: string },
    caller: Caller,
    list: (toolId: string | readonly string[], after: JournalCursor | undefined, limit: number) => Promise<PendingPage>,
  ): Promise<{ calls: Call[]; nextPageToken: string }> {
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
      calls: page.calls.map(callToProto),
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
  async resumeCall(req: ResumeCallRequest, caller: Caller): Promise<ResumeCallResponse> {
    this.d.access.requireRuntime(caller, "ResumeCall");
    requireCallId(req.callId);
    const call = await this.d.journal.require(req.callId);
    await this.d.access.requireTool(caller, await this.d.registry.require(call.tool_id), "resume calls of", { operatorsToo: false, callId: call._id });
    if (call.state === "completed") {
      return { call: callToProto(call), action: ResumeAction.RESUME_ACTION_ALREADY_COMPLETED, capability: "", capabilityExpiresAt: undefined };
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
        await this.d.journal.markIndeterminate(call._id, "UNSAFE_NOT_RESUMABLE", message);
        this.d.logger.warn({ call_id: call._id, tool_id: call.tool_id }, "unsafe call marked indeterminate at recovery");
        throw refuse(Reasons.UNSAFE_NOT_RESUMABLE, message, { call_id: call._id, tool_id: call.tool_id });
      }
      case "idempotent": {
        if (req.lookupOnly) return leftPending(call);
        return this.retry(call, tool, await this.rederive(tool, call));
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
        });
        const { found, entryId } = await this.d.ledger.lookup(requestId, probe.token);
        if (found) {
          const { call: done } = await this.d.journal.complete(call._id, "succeeded", `recovery: the ledger holds request ${requestId} (entry ${entryId})`);
          return { call: callToProto(done), action: ResumeAction.RESUME_ACTION_DONE, capability: "", capabilityExpiresAt: undefined };
        }
        // Minting the retry capability moves the call to its next attempt; a caller that
        // cannot run the retry would use one up on every pass.
        if (req.lookupOnly) return leftPending(call);
        return this.retry(call, tool, { requestId });
      }
    }
  }

  getSigningKeys(): GetSigningKeysResponse {
    return { jwksJson: JSON.stringify(this.d.keys.publicJwks()), currentKeyId: this.d.keys.currentKid };
  }

  private identify(tool: CompiledTool, args: ParsedArguments, runId: string): { key?: string; requestId?: string; derivation?: DerivationClaim } {
    const e = tool.definition.effect;
    if (e.kind === "idempotent") return { key: deriveKey(tool.definition.toolId, e.key, args, { runId }), derivation: derivationClaim(e.key, { runId }) };
    if (e.kind === "queryable") return { requestId: readRequestId(args, e.requestIdField) };
    return {};
  }

  private async rederive(tool: CompiledTool, call: CallRecord): Promise<{ key: string; derivation?: DerivationClaim }> {
    let identity: { key?: string; derivation?: DerivationClaim } = {};
    let problem = "";
    try {
      identity = this.identify(tool, parseArguments(call.arguments_json, this.d.limits), call.run_id);
    } catch (err) {
      problem = err instanceof Error ? err.message : String(err);
    }
    const key = identity.key;
    if (key !== undefined && key === call.key) return { key, ...(identity.derivation ? { derivation: identity.derivation } : {}) };
    const message =
      `call ${call._id}: the key re-derived from the recorded arguments ` +
      (key === undefined ? `could not be computed (${problem})` : "differs from the journaled key") +
      "; the call is not retried under another key";
    await this.d.journal.recordResumeRefusal(call._id, "KEY_REDERIVATION_MISMATCH", message);
    this.d.logger.error({ call_id: call._id, tool_id: call.tool_id }, "key re-derivation mismatch at recovery");
    throw refuse(Reasons.KEY_REDERIVATION_MISMATCH, message, { call_id: call._id, tool_id: call.tool_id });
  }

  private async retry(
    call: CallRecord,
    tool: CompiledTool,
    identity: { key?: string; requestId?: string; derivation?: DerivationClaim },
  ): Promise<ResumeCallResponse> {
    // The capability names the principal that began the call, whoever resumes it.
    const minted: MintedCapability = await this.d.minter.mint({
      principal: call.principal ?? call.capability.sub ?? "unknown",
      toolId: call.tool_id,
      effect: tool.definition.effect.kind,
      callId: call._id,
      attempt: call.attempt + 1,
      ...identity,
    });
    const advanced = await this.d.journal.advanceAttempt(call, minted.claims);
    this.d.logger.info({ call_id: call._id, tool_id: call.tool_id, attempt: advanced.attempt }, "call resumed");
    return { call: callToProto(advanced), action: ResumeAction.RESUME_ACTION_RETRY, capability: minted.token, capabilityExpiresAt: minted.expiresAt };
  }
}

function requireCallId(callId: string): void {
  if (!CALL_ID.test(callId)) throw refuse(Reasons.INVALID_CALL_ID, "call_id is required (1-128 of [A-Za-z0-9._:-])", { field: "call_id" });
}

function outcomeName(outcome: CallOutcome): CallOutcomeName {
  if (outcome === CallOutcome.CALL_OUTCOME_SUCCEEDED) return "succeeded";
  if (outcome === CallOutcome.CALL_OUTCOME_FAILED) return "failed";
  throw refuse(Reasons.OUTCOME_REQUIRED, "outcome is required: CALL_OUTCOME_SUCCEEDED or CALL_OUTCOME_FAILED", { field: "outcome" });
}

/** A journal record as the wire Call. */
export function callToProto(c: CallRecord): Call {
  return {
    callId: c._id,
    toolId: c.tool_id,
    runId: c.run_id,
    argumentsJson: c.arguments_json,
    effectKind: effectKindOf(c.effect),
    key: c.key ?? "",
    requestId: c.request_id ?? "",
    attempt: c.attempt,
    state: c.state === "pending" ? CallState.CALL_STATE_PENDING : c.state === "completed" ? CallState.CALL_STATE_COMPLETED : CallState.CALL_STATE_INDETERMINATE,
    outcome:
      c.outcome === "succeeded"
        ? CallOutcome.CALL_OUTCOME_SUCCEEDED
        : c.outcome === "failed"
          ? CallOutcome.CALL_OUTCOME_FAILED
          : CallOutcome.CALL_OUTCOME_UNSPECIFIED,
    outcomeDetail: c.outcome_detail ?? "",
    createdAt: c.created_at,
    updatedAt: c.updated_at,
    principal: c.principal ?? "",
  };
}

function leftPending(call: CallRecord): ResumeCallResponse {
  return { call: callToProto(call), action: ResumeAction.RESUME_ACTION_LEFT_PENDING, capability: "", capabilityExpiresAt: undefined };
}

/** The gRPC binding of the kernel: every RPC but GetSigningKeys authenticates its caller (kernel-handlers). */
export function kernelServiceImpl(kernel: Kernel, edge: KernelEdge): KernelServiceServer {
  const handle = <Req, Res>(method: string, fn: (r: Req, c: Caller) => Promise<Res>) => kernelHandler(edge, method, fn);
  return {
    registerTool: handle("RegisterTool", (r: RegisterToolRequest, c) => kernel.registerTool(r, c)),
    getTool: handle("GetTool", (r: GetToolRequest, c) => kernel.getTool(r, c)),
    listTools: handle("ListTools", (r: ListToolsRequest, c) => kernel.listTools(r, c)),
    beginCall: handle("BeginCall", (r: BeginCallRequest, c) => kernel.beginCall(r, c)),
    completeCall: handle("CompleteCall", (r: CompleteCallRequest, c) => kernel.completeCall(r, c)),
    beginCalls: kernelBatchHandler<BeginCallsRequest, BeginCallsResponse, BeginCallRequest, BeginCallResponse>(
      edge,
      "BeginCalls",
      "BeginCall",
      (r, c) => kernel.beginCall(r, c),
      (results) => ({
        results: results.map((r) => ({ result: r.$case === "ok" ? { $case: "begun", value: r.value } : { $case: "errorStatus", value: r.status } })),
      }),
    ),
    completeCalls: kernelBatchHandler<CompleteCallsRequest, CompleteCallsResponse, CompleteCallRequest, CompleteCallResponse>(
      edge,
      "CompleteCalls",
      "CompleteCall",
      (r, c) => kernel.completeCall(r, c),
      (results) => ({
        results: results.map((r) => ({ result: r.$case === "ok" ? { $case: "completed", value: r.value } : { $case: "errorStatus", value: r.status } })),
      }),
    ),
    listPendingCalls: handle("ListPendingCalls", (r: ListPendingCallsRequest, c) => kernel.listPendingCalls(r, c)),
    resumeCall: handle("ResumeCall", (r: ResumeCallRequest, c) => kernel.resumeCall(r, c)),
    listIndeterminateCalls: handle("ListIndeterminateCalls", (r: ListIndeterminateCallsRequest, c) => kernel.listIndeterminateCalls(r, c)),
    // The JWKS is public (kernel.proto): its authenticity comes from the channel, not the caller.
    getSigningKeys: kernelHandler(edge, "GetSigningKeys", async () => kernel.getSigningKeys(), { anonymous: true }),
  };
}

export type { CapabilityClaims };
