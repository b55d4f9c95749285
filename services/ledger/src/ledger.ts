/**
 * The ledger's Write and LookupRequest, enforcing the capability (one verification function)
 * and the write rule, recording every refusal before it is returned. Free of the transport
 * and of the wire's types: ledger-grpc.ts binds it to grpc-js, ledger-proto.ts maps results.
 */
import { faultPoint } from "../../common/src/fault-points";
import { REASON_CODES, Reasons } from "../../common/src/refuse";
import { createHash, randomUUID } from "node:crypto";
import { KeycapError, codeName, type KeycapCode } from "../../common/src/errors";
import type { Logger } from "../../common/src/logger";
import { CapabilityRefusal, unverifiedRefusalRecord, verifiedRefusalRecord } from "../../capability/src";
import type { CapabilityVerifier, VerifiedCapability } from "../../capability/src";
import {
  CAPABILITY_REUSED,
  REPLAY_NO_RECORDED_EFFECT,
  SANDBOX_UNSAFE_DENIED,
  decideLookup,
  decideWrite,
  legacyQueryableEffectId,
  type RuleRefusal,
  type WriteGrant,
} from "./domain/write-rule";
import type { EntryDoc, EntryStore } from "./entry-store";
import type { ShadowStore } from "./shadow-store";
import type { RejectionAudit } from "../../common/src/rejection-audit";
import type { Metrics } from "../../common/src/metrics";
import { writeCompletesCall } from "../../common/src/domain/call-completion";
import { issueReceipt, type CompletionReceipt } from "../../common/src/domain/completion-receipt";

export interface LedgerDeps {
  verifier: CapabilityVerifier;
  entries: EntryStore;
  /** Where shadow runs' effects go (ADR 0028). */
  shadow: ShadowStore;
  audit: RejectionAudit;
  /** Largest accepted payload, in bytes. */
  maxPayloadBytes: number;
  /** Clock tolerance of the verifier, in seconds (how long past `exp` a capability still verifies). */
  clockToleranceSeconds: number;
  logger: Logger;
  /** Write outcomes and verification times; undefined: not recorded. */
  metrics?: Metrics | undefined;
  /** The completion receipts' key (ADR 0035), shared with the kernel through the database. */
  receiptKey: Uint8Array;
}

/** Who is calling: what the transport says, never the request body. */
export interface CallContext {
  /** The `authorization` metadata values. */
  authorization: string[];
  /** The peer address as gRPC reports it. */
  peer: string;
}

/** A Write: the effect's key or request id as the writer names it, and its payload. */
export interface WriteInput {
  key: string;
  requestId: string;
  payload: Buffer;
}

/** What a Write did: a new entry, or the one already held for the effect (flagged when the payload differs). */
export interface WriteOutcome {
  entry: EntryDoc;
  duplicate: boolean;
  payloadMismatch: boolean;
  /** A replay capability: answered from the recorded entry; nothing was written. */
  replayed?: boolean;
  /** A shadow capability: the entry is in the shadow store, never in `entries`. */
  shadow?: boolean;
  /** The entry is the call's completion (ADR 0034): the caller need not send CompleteCall. */
  completesCall?: boolean;
  /** With completesCall: the receipt the client forwards so the kernel need not read the entry (ADR 0035). */
  completionReceipt?: CompletionReceipt;
}

/** The ledger's behaviour, independent of transport. */
export class Ledger {
  constructor(private readonly d: LedgerDeps) {}

  async write(req: WriteInput, ctx: CallContext): Promise<WriteOutcome> {
    const attempted = { attemptedKey: req.key, attemptedRequestId: req.requestId };
    const cap = await this.verify("Write", ctx, attempted);
    // A sandbox capability never produces a live effect, whatever else it grants (ADR 0028).
    if (cap.mode !== undefined && cap.effect === "unsafe") throw await this.refuseGrant("Write", ctx, cap, SANDBOX_UNSAFE_DENIED, attempted);
    const decision = decideWrite(cap, { key: req.key, requestId: req.requestId, payloadBytes: req.payload.length }, this.d.maxPayloadBytes);
    if (!decision.ok) throw await this.refuseGrant("Write", ctx, cap, decision.refusal, attempted);
    const grant = decision.grant;
    if (cap.mode === "replay") return this.answerReplay(cap, grant, req.payload, ctx, attempted);
    if (cap.mode === "shadow") return this.writeShadow(cap, grant, req.payload);

    // Queryable: the capability is spent before the effect is claimed. Spent already: a
    // replay, refused below when its effect exists; when it does not, a crash came
    // between this capability's spend and its insert, and this same write may finish
    // (the request id is bound, so it can only ever be that one effect: ADR 0004).
    let spentBefore = false;
    if (grant.spendCapability) {
      const expiresAt = new Date((cap.exp + this.d.clockToleranceSeconds + 1) * 1000);
      spentBefore = !(await this.d.entries.spendCapability(cap.jti, cap.tool_id, expiresAt));
      if (spentBefore && this.d.entries.knownToExist(grant.effectId)) throw await this.refuseGrant("Write", ctx, cap, CAPABILITY_REUSED, attempted);
      faultPoint("ledger.write.after-spend");
    }

    const doc = entryOf(cap, grant, req.payload);
    const payloadSha256 = doc.payload_sha256;
    // An effect an older ledger recorded under the ambiguous queryable id is that effect.
    const legacy = grant.effect === "queryable" ? await this.legacyQueryable(cap.tool_id, grant.requestId) : null;
    // A known entry cannot be claimed again; skipping the doomed insert keeps a
    // retry storm cheaper than the original traffic. Unknown: the unique insert decides.
    if (!legacy && !this.d.entries.knownToExist(grant.effectId) && (await this.d.entries.insert(doc))) {
      this.d.metrics?.write(cap.tool_id, "new");
      return { entry: doc, duplicate: false, payloadMismatch: false, ...this.completion(cap, doc, false) };
    }
    if (grant.duplicateIsReuse || spentBefore) throw await this.refuseGrant("Write", ctx, cap, CAPABILITY_REUSED, attempted);

    const { entry, payloadMismatch } = await this.d.entries.recordDuplicate(legacy?._id ?? grant.effectId, {
      toolId: cap.tool_id,
      callId: cap.call_id,
      attempt: cap.attempt,
      capabilityId: cap.jti,
      payloadSha256,
      payload: req.payload,
    });
    this.d.metrics?.write(cap.tool_id, payloadMismatch ? "payload_mismatch" : "duplicate");
    if (payloadMismatch) {
      this.d.logger.warn(
        { tool_id: cap.tool_id, entry_id: entry.entry_id, call_id: cap.call_id, capability_id: cap.jti },
        "duplicate write carried a different payload; original kept, entry flagged",
      );
    }
    return { entry, duplicate: true, payloadMismatch, ...this.completion(cap, entry, payloadMismatch) };
  }

  /** Whether the entry completes the capability's call, and then its receipt. */
  private completion(cap: VerifiedCapability, entry: EntryDoc, payloadMismatch: boolean): Pick<WriteOutcome, "completesCall" | "completionReceipt"> {
    if (!completes(cap, entry, payloadMismatch) || cap.key === undefined) return { completesCall: false };
    const receipt = issueReceipt(this.d.receiptKey, cap.key, { callId: entry.call_id, recordedAtMs: entry.recorded_at.getTime() });
    return { completesCall: true, completionReceipt: receipt };
  }

  /**
   * A replay write: answered from the recorded (live) entry under the same effect id, as a
   * duplicate marked replayed; nothing is written, not even a duplicate record. No recorded
   * entry: refused REPLAY_NO_RECORDED_EFFECT (a replay never creates an effect).
   */
  private async answerReplay(cap: VerifiedCapability, grant: WriteGrant, payload: Buffer, ctx: CallContext, attempted: Attempted): Promise<WriteOutcome> {
    const entry = await this.d.entries.findByEffectId(grant.effectId);
    if (!entry) throw await this.refuseGrant("Write", ctx, cap, REPLAY_NO_RECORDED_EFFECT, attempted);
    const payloadMismatch = entry.payload_sha256 !== createHash("sha256").update(payload).digest("hex");
    return { entry, duplicate: true, payloadMismatch, replayed: true };
  }

  /** A shadow write: into the shadow store under the same effect id, never into `entries`. */
  private async writeShadow(cap: VerifiedCapability, grant: WriteGrant, payload: Buffer): Promise<WriteOutcome> {
    const doc = entryOf(cap, grant, payload);
    const { entry, duplicate } = await this.d.shadow.insert(doc);
    return { entry, duplicate, payloadMismatch: duplicate && entry.payload_sha256 !== doc.payload_sha256, shadow: true };
  }

  /** The entry of a Queryable call's request, or undefined when the ledger holds none. */
  async lookupRequest(req: { requestId: string }, ctx: CallContext): Promise<EntryDoc | undefined> {
    const attempted = { attemptedRequestId: req.requestId };
    const cap = await this.verify("LookupRequest", ctx, attempted);
    const decision = decideLookup(cap, req.requestId);
    if (!decision.ok) throw await this.refuseGrant("LookupRequest", ctx, cap, decision.refusal, attempted);
    // A shadow run asks its own store; a replay asks the recorded (live) one.
    if (cap.mode === "shadow") return (await this.d.shadow.findByEffectId(decision.effectId)) ?? undefined;
    const entry = (await this.d.entries.findByEffectId(decision.effectId)) ?? (await this.legacyQueryable(cap.tool_id, req.requestId));
    return entry ?? undefined;
  }

  /** The entry an older ledger wrote for this request, when the database has any such. */
  private async legacyQueryable(toolId: string, requestId: string): Promise<EntryDoc | null> {
    if (!this.d.entries.hasLegacyQueryable) return null;
    const old = await this.d.entries.findByEffectId(legacyQueryableEffectId(toolId, requestId));
    // The old id was ambiguous: only an entry of this very tool and request is this effect.
    return old && old.tool_id === toolId && old.request_id === requestId ? old : null;
  }

  /** Verifies the capability, recording a refusal before rethrowing it. */
  private async verify(method: string, ctx: CallContext, attempted: Attempted): Promise<VerifiedCapability> {
    const started = this.d.metrics ? performance.now() : 0;
    try {
      if (ctx.authorization.length > 1) {
        throw new CapabilityRefusal(Reasons.CAPABILITY_MALFORMED, "more than one authorization value", {}, {}, false);
      }
      const cap = await this.d.verifier.verify(ctx.authorization[0]);
      this.d.metrics?.verification(true, (performance.now() - started) / 1000);
      return cap;
    } catch (err) {
      if (!(err instanceof CapabilityRefusal)) throw err;
      this.d.metrics?.verification(false, (performance.now() - started) / 1000);
      await this.d.audit.record({ ...unverifiedRefusalRecord(err, { method, peer: ctx.peer }), ...attempted });
      throw err;
    }
  }

  /** Records a refusal of a verified capability and returns the error to throw. */
  private async refuseGrant(method: string, ctx: CallContext, cap: VerifiedCapability, refusal: RuleRefusal, attempted: Attempted): Promise<KeycapError> {
    // The catalogue's code: PERMISSION_DENIED outside the grant, INVALID_ARGUMENT for a
    // malformed request, FAILED_PRECONDITION for a replay with nothing recorded.
    const code = REASON_CODES[refusal.reason] as KeycapCode;
    await this.d.audit.record({
      ...verifiedRefusalRecord({ reason: refusal.reason, code: codeName(code), message: refusal.message }, cap, { method, peer: ctx.peer }),
      ...attempted,
    });
    this.d.logger.debug({ method, reason: refusal.reason, tool_id: cap.tool_id, call_id: cap.call_id }, "refused");
    return new KeycapError(code, refusal.reason, refusal.message);
  }
}

type Attempted = { attemptedKey?: string; attemptedRequestId?: string };

/** The entry a granted write records, live or shadow: the grant's effect id, the capability's claims, the payload and its hash. */
function entryOf(cap: VerifiedCapability, grant: WriteGrant, payload: Buffer): EntryDoc {
  return {
    _id: grant.effectId,
    entry_id: newEntryId(),
    tool_id: cap.tool_id,
    effect: grant.effect,
    call_id: cap.call_id,
    attempt: cap.attempt,
    capability_id: cap.jti,
    key: grant.key,
    request_id: grant.requestId,
    payload,
    payload_sha256: createHash("sha256").update(payload).digest("hex"),
    recorded_at: new Date(),
    payload_mismatch: false,
    principal: cap.sub,
  };
}

/** A fresh opaque entry id. */
export function newEntryId(): string {
  // randomUUID draws from a cached entropy pool; randomBytes(16) was a synchronous syscall per write.
  return `e_${randomUUID().replaceAll("-", "")}`;
}

/** Whether this live write's entry completes its call (ADR 0034). */
function completes(cap: VerifiedCapability, entry: EntryDoc, payloadMismatch: boolean): boolean {
  return writeCompletesCall({
    effect: cap.effect,
    ...(cap.mode !== undefined ? { mode: cap.mode } : {}),
    callId: cap.call_id,
    entryCallId: entry.call_id,
    payloadMismatch,
  });
}
