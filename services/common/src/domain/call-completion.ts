/**
 * When the ledger's entry is a call's completion (ADR 0034): one rule, read by the ledger (to
 * answer `completes_call`) and by the kernel (to settle the call), never by transport code.
 */

/** The entry `_id` of an idempotent effect: the key alone decides (never the content). */
export function idempotentEffectId(key: string): string {
  return `idem:${key}`;
}

/** What the rule needs of a write the ledger answered. */
export interface AnsweredWrite {
  effect: string;
  /** The capability's run mode; absent when live. */
  mode?: string;
  /** The call the capability was minted for. */
  callId: string;
  /** The call id the entry carries (the first write's). */
  entryCallId: string;
  payloadMismatch: boolean;
}

/**
 * A live Idempotent write completes its call when the entry is that call's: written now, or
 * by the same call's earlier attempt. A duplicate of another call's effect (same key, another
 * call id) or a payload mismatch leaves the outcome to the caller's CompleteCall.
 */
export function writeCompletesCall(w: AnsweredWrite): boolean {
  return w.effect === "idempotent" && w.mode === undefined && w.entryCallId === w.callId && !w.payloadMismatch;
}

/** The kernel's side: the entry that completes this journaled call, if it is one. */
export function entryCompletes(call: { _id: string; effect: string; key?: string; mode?: string }, entry: { _id: string; call_id: string }): boolean {
  return (
    call.effect === "idempotent" &&
    call.mode === undefined &&
    call.key !== undefined &&
    entry._id === idempotentEffectId(call.key) &&
    entry.call_id === call._id
  );
}
