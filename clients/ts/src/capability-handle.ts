import { CallOutcome, CallState, type Call, type CompleteCallResponse } from "../gen/keycap/kernel/v1/kernel";
import type { LookupRequestResponse, WriteResponse } from "../gen/keycap/ledger/v1/ledger";
import { EffectKind } from "../gen/keycap/effect/v1/effect";
import type { KernelClient } from "./kernel-client";
import type { LedgerClient } from "./ledger-client";
import type { CallSettings } from "./rpc";

/**
 * What a tool holds while it runs: the call's identity and a capability it
 * cannot misuse. write() always sends the kernel-derived key (or request id)
 * with the capability; there is no way to pass another key through it. The
 * capability itself is private to the handle.
 */
export class CapabilityHandle {
  readonly #capability: string;
  /** The ledger answered that its entry completes this call (ADR 0034): no CompleteCall to send for success. */
  #completedByWrite = false;

  constructor(
    readonly call: Readonly<Call>,
    capability: string,
    readonly expiresAt: Date | undefined,
    private readonly ledger: LedgerClient | undefined,
    private readonly kernel: KernelClient,
  ) {
    this.#capability = capability;
  }

  get callId(): string {
    return this.call.callId;
  }
  get toolId(): string {
    return this.call.toolId;
  }
  /** The kernel-derived idempotency key ("" unless Idempotent). */
  get key(): string {
    return this.call.key;
  }
  /** The request id ("" unless Queryable). */
  get requestId(): string {
    return this.call.requestId;
  }
  get attempt(): number {
    return this.call.attempt;
  }
  get effectKind(): EffectKind {
    return this.call.effectKind;
  }

  /** Records the effect in the ledger under the kernel's key. */
  async write(payload: Uint8Array | string, s?: CallSettings): Promise<WriteResponse> {
    if (!this.ledger) throw new Error("KernelClient was created without ledgerAddress; handles cannot write");
    const body = typeof payload === "string" ? Buffer.from(payload, "utf8") : Buffer.from(payload);
    // A single-use capability's write is not retried blindly: if the first try took
    // effect and only its answer was lost, a retry would be refused CAPABILITY_REUSED.
    const singleUse = this.call.effectKind !== EffectKind.EFFECT_KIND_IDEMPOTENT;
    const res = await this.ledger.writeWithCapability(
      this.#capability,
      { key: this.call.key, requestId: this.call.requestId, payload: body },
      singleUse ? { retry: false, ...s } : s,
    );
    if (res.completesCall) this.#completedByWrite = true;
    if (res.completionReceipt) this.kernel.forwardReceipt(res.completionReceipt);
    return res;
  }

  /** True once the ledger answered that its entry completes this call: complete("succeeded") then sends nothing. */
  get completedByWrite(): boolean {
    return this.#completedByWrite;
  }

  /** Queryable: asks the ledger whether this call's request already took effect. */
  lookup(s?: CallSettings): Promise<LookupRequestResponse> {
    if (!this.ledger) throw new Error("KernelClient was created without ledgerAddress; handles cannot look up");
    return this.ledger.lookupWithCapability(this.#capability, this.call.requestId, s);
  }

  /**
   * Marks the call done in the kernel's journal. After a write whose entry completes the call
   * (ADR 0034) a success is already recorded: answered here, without a CompleteCall hop (the
   * kernel settles the call from the entry). A "failed" outcome, a detail, or a write that did
   * not complete the call is sent as before.
   */
  complete(outcome: "succeeded" | "failed" = "succeeded", detail = "", s?: CallSettings): Promise<CompleteCallResponse> {
    if (this.#completedByWrite && outcome === "succeeded" && detail === "") {
      return Promise.resolve({
        call: { ...this.call, state: CallState.CALL_STATE_COMPLETED, outcome: CallOutcome.CALL_OUTCOME_SUCCEEDED },
        alreadyCompleted: false,
      });
    }
    return this.kernel.completeCall(this.call.callId, outcome, detail, s);
  }
}
