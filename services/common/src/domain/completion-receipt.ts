/**
 * The ledger's receipt that a write's entry completes its call (ADR 0035): a MAC the ledger
 * computes when it answers the write and the kernel checks when a client forwards it, so the
 * kernel settles the call without reading the entry back. The key is shared through the
 * database both services write, so a receipt proves no more than the entry itself would:
 * whoever could forge one could write the entry.
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import { idempotentEffectId } from "./call-completion";

/** What a receipt states: this call's entry, recorded then. */
export interface ReceiptClaim {
  callId: string;
  /** The entry's `recorded_at`, in ms since the epoch (the completion's time). */
  recordedAtMs: number;
}

export interface CompletionReceipt extends ReceiptClaim {
  mac: Uint8Array;
}

/** Bytes of a key (HMAC-SHA256's block-size-friendly 32). */
export const RECEIPT_KEY_BYTES = 32;

const DOMAIN = "keycap.completion-receipt.v1";

function macOf(key: Uint8Array, effectId: string, claim: ReceiptClaim): Buffer {
  // Length-prefixed fields: no two claims share an input, whatever their characters.
  const h = createHmac("sha256", key);
  for (const field of [DOMAIN, effectId, claim.callId, String(claim.recordedAtMs)]) {
    h.update(`${Buffer.byteLength(field)}:`);
    h.update(field);
  }
  return h.digest();
}

/** The ledger's side: the receipt of the entry under `key` (its idempotency key) for this call. */
export function issueReceipt(secret: Uint8Array, idempotencyKey: string, claim: ReceiptClaim): CompletionReceipt {
  return { ...claim, mac: macOf(secret, idempotentEffectId(idempotencyKey), claim) };
}

/** The kernel's side: whether the receipt was issued for this call's entry (its key as the kernel derived it). */
export function receiptHolds(secret: Uint8Array, idempotencyKey: string, receipt: CompletionReceipt): boolean {
  if (!Number.isSafeInteger(receipt.recordedAtMs) || receipt.mac.length !== 32) return false;
  return timingSafeEqual(macOf(secret, idempotentEffectId(idempotencyKey), receipt), receipt.mac);
}
