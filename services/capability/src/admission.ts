/**
 * A sink: a service that performs an effect and admits a request only under a genuine
 * capability for one of its tools (ADR 0013). The admission order is fixed, so a request
 * breaking several rules gets the same reason every time: the ledger's verification, the
 * run mode (live only, unless the service applies modes itself; Unsafe never in a sandbox
 * run: ADR 0028, 0029), the tool allow-list, the request's idempotency key against the
 * capability's, then single use for unsafe and queryable capabilities. Every refusal goes to the hook and, when
 * configured, to keycap's refusal store under `sink:<name>`.
 */
import { CLOCK_TOLERANCE_SECONDS } from "./claims";
import { KeycapError, codeName } from "../../common/src/errors";
import type { RejectionInput } from "../../common/src/rejection-audit";
import { sinkService } from "../../common/src/sink-name";
import { CapabilityRefusal } from "./refusal";
import { CapabilityVerifier, type CapabilityVerifierOptions, type VerifiedCapability } from "./verifier";
import type { PublicKeySource } from "./key-sources";
import { unverifiedRefusalRecord, verifiedRefusalRecord } from "./refusal-record";
import type { SpentStore } from "./spent-store";
import { Reasons, refuse } from "../../common/src/refuse";

export type { VerifiedCapability } from "./verifier";

/** Where refusals are recorded: keycap's RejectionAudit, opened by {@link openSinkRefusalStore}. */
export interface RefusalRecorder {
  record(input: RejectionInput): Promise<void>;
}

/** What the transport knows about the request being admitted. */
export interface AdmissionContext {
  /** gRPC full method (`/pkg.Service/Method`) or `HTTP <METHOD> <path>`. */
  method: string;
  /** The caller's address, `ip:port`. */
  peer: string;
  /** The request's own idempotency key (metadata `idempotency-key`, header `Idempotency-Key`), if it sent one. */
  idempotencyKey?: string;
}

/** A refusal as the hook sees it. */
export interface SinkRefusalEvent {
  sink: string;
  error: KeycapError;
  context: AdmissionContext;
  /** The tool the capability names, verified or not (see `toolIdVerified`); "" when unreadable. */
  toolId: string;
  toolIdVerified: boolean;
}

/** Options of {@link Sink}. */
export interface SinkOptions {
  /** The sink's name in refusal records (`sink:<name>`): 1-63 of [a-z0-9._-]. */
  name: string;
  /**
   * Tool ids this sink serves, or a test of a tool id; a capability for any other is refused
   * TOOL_NOT_ACCEPTED.
   */
  tools: readonly string[] | ((toolId: string) => boolean);
  /** The kernel's public keys (RemoteJwksSource over KernelJwksFetcher, or FileJwksSource). */
  keys: PublicKeySource;
  /** The ledger's verification options (issuer, audience, limits, clock); defaults are the ledger's. */
  verifier?: CapabilityVerifierOptions;
  /** Required when any capability may be unsafe or queryable: spends each one once. */
  spentStore?: SpentStore;
  /** keycap's refusal store; without it refusals reach only `onRefusal`. */
  refusals?: RefusalRecorder;
  /**
   * What a capability of a shadow or replay run gets (ADR 0028): "refuse" (default) refuses it
   * SANDBOX_CAPABILITY_NOT_LIVE, for a service that performs live effects only; "admit" admits
   * it, with its `mode`, for a service that applies the mode itself and never performs a live
   * effect for it (keycap's HTTP gateway, ADR 0029). An Unsafe one is refused
   * SANDBOX_UNSAFE_DENIED either way.
   */
  sandbox?: "refuse" | "admit";
  /** Called for every refusal, after it is recorded. Must not throw. */
  onRefusal?: (event: SinkRefusalEvent) => void;
  now?: () => number;
}

/**
 * Admits requests under capabilities.
 *
 * @example
 * const sink = new Sink({ name: "payments", tools: ["payments.charge"], keys, spentStore });
 * const cap = await sink.admit(req.headers.authorization, { method: "HTTP POST /charges", peer });
 * charge(cap.key!); // the kernel-derived key is the charge's own idempotency key
 */
export class Sink {
  readonly name: string;
  private readonly service: string;
  private readonly serves: (toolId: string) => boolean;
  private readonly verifier: CapabilityVerifier;
  private readonly now: () => number;
  private readonly toleranceMs: number;

  constructor(private readonly opts: SinkOptions) {
    this.service = sinkService(opts.name);
    this.name = opts.name;
    if (typeof opts.tools === "function") {
      this.serves = opts.tools;
    } else {
      if (opts.tools.length === 0) throw new RangeError("a sink must name the tools it serves (tools: [...])");
      const tools = new Set(opts.tools);
      this.serves = (toolId) => tools.has(toolId);
    }
    this.now = opts.now ?? Date.now;
    // Sandbox capabilities are verified so their refusal names the verified tool; then refused (checkVerified).
    this.verifier = new CapabilityVerifier(opts.keys, { now: this.now, ...opts.verifier, sandbox: "verify" });
    this.toleranceMs = (opts.verifier?.clockToleranceSeconds ?? CLOCK_TOLERANCE_SECONDS) * 1000;
  }

  /**
   * Admits one request: resolves to the verified claims, or rejects with a KeycapError
   * (a CapabilityRefusal for verification failures) after recording it.
   */
  async admit(authorization: string | undefined, context: AdmissionContext): Promise<VerifiedCapability> {
    let cap: VerifiedCapability;
    try {
      cap = await this.verifier.verify(authorization);
    } catch (err) {
      if (!(err instanceof CapabilityRefusal)) throw err;
      await this.refuseUnverified(err, context);
      throw err;
    }
    const refusal = await this.checkVerified(cap, context);
    if (refusal) {
      await this.recordRefusal(refusal, cap, context);
      throw refusal;
    }
    return cap;
  }

  /**
   * Records a refusal the service decided after admission (its own rules for an admitted
   * capability), the way the sink records its own: to the store, then the hook.
   */
  async recordRefusal(err: KeycapError, cap: VerifiedCapability, context: AdmissionContext): Promise<void> {
    await this.refuseVerified(err, cap, context);
  }

  private async checkVerified(cap: VerifiedCapability, context: AdmissionContext): Promise<KeycapError | undefined> {
    // A sink performs live effects: a shadow or replay capability grants none here (ADR 0028).
    if (cap.mode !== undefined && this.opts.sandbox !== "admit") {
      return refuse(Reasons.SANDBOX_CAPABILITY_NOT_LIVE, `sink ${this.name} performs live effects only; this capability is of a ${cap.mode} run`, {
        mode: cap.mode,
      });
    }
    if (cap.mode !== undefined && cap.effect === "unsafe") {
      return refuse(Reasons.SANDBOX_UNSAFE_DENIED, `tool ${cap.tool_id} is Unsafe: it is denied outright in a ${cap.mode} run`, { mode: cap.mode });
    }
    if (!this.serves(cap.tool_id)) {
      return refuse(Reasons.TOOL_NOT_ACCEPTED, `sink ${this.name} does not serve tool ${JSON.stringify(cap.tool_id.slice(0, 128))}`);
    }
    if (context.idempotencyKey !== undefined && context.idempotencyKey !== cap.key) {
      return refuse(Reasons.KEY_MISMATCH, "the request's idempotency key is not the capability's key");
    }
    if (cap.effect === "idempotent") return undefined;
    if (!this.opts.spentStore) {
      // Running an unsafe effect without single use would be the double charge keycap exists to stop.
      return refuse(Reasons.EFFECT_CLASS_MISMATCH, `sink ${this.name} has no spent store, so it accepts idempotent capabilities only`);
    }
    try {
      const first = await this.opts.spentStore.spend({
        sink: this.name,
        jti: cap.jti,
        toolId: cap.tool_id,
        callId: cap.call_id,
        effect: cap.effect,
        expiresAt: new Date(cap.exp * 1000 + this.toleranceMs),
      });
      if (!first) return refuse(Reasons.CAPABILITY_REUSED, `this ${cap.effect} capability was already used at sink ${this.name}`);
    } catch (err) {
      if (err instanceof KeycapError) return err;
      const e = refuse(Reasons.DATABASE_UNAVAILABLE, "the spent-capability store failed; retry");
      (e as { cause?: unknown }).cause = err;
      return e;
    }
    return undefined;
  }

  private async refuseUnverified(err: CapabilityRefusal, context: AdmissionContext): Promise<void> {
    const record = unverifiedRefusalRecord(err, { method: context.method, peer: context.peer });
    await this.report({ ...record, attemptedKey: context.idempotencyKey }, err, context);
  }

  private async refuseVerified(err: KeycapError, cap: VerifiedCapability, context: AdmissionContext): Promise<void> {
    const record = verifiedRefusalRecord({ reason: err.reason, code: codeName(err.code), message: err.message }, cap, {
      method: context.method,
      peer: context.peer,
    });
    await this.report({ ...record, attemptedKey: context.idempotencyKey }, err, context);
  }

  private async report(input: RejectionInput, error: KeycapError, context: AdmissionContext): Promise<void> {
    // RejectionAudit.record never throws; a recorder that does must not turn a refusal into a crash.
    await this.opts.refusals?.record(input).catch(() => undefined);
    try {
      this.opts.onRefusal?.({ sink: this.name, error, context, toolId: input.toolId ?? "", toolIdVerified: input.toolIdVerified });
    } catch {
      // The hook is the user's; its failure is not the caller's refusal.
    }
  }

  /** `service` of this sink's refusal records. */
  get refusalService(): string {
    return this.service;
  }
}
