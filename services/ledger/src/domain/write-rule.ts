/**
 * The ledger's rule (DESIGN §4), as a pure decision: given a capability whose signature
 * and claims already verified, and what the call asks for, either the write is within the
 * capability's grant (and this says under which identity its one effect is claimed), or
 * it is refused with a reason. No MongoDB, no gRPC: the caller turns a refusal into a
 * status code and a record, and a grant into inserts.
 *
 * | effect     | write must carry | accepted when                   | effect claimed under          |
 * | ---------- | ---------------- | ------------------------------- | ----------------------------- |
 * | idempotent | `key`            | key == capability key           | `idem:<key>`                  |
 * | queryable  | `request_id`     | request id == capability's      | `req:["<tool>","<request id>"]`, after the capability id is spent |
 * | unsafe     | neither          | valid capability                | `cap:<capability id>` (so a second use collides) |
 */
import { idempotentEffectId } from "../../../common/src/domain/call-completion";
import type { CapabilityClaims, EffectName } from "../../../capability/src/claims";

/** The verified claims the rule reads (a VerifiedCapability satisfies it). */
export type GrantClaims = Pick<CapabilityClaims, "tool_id" | "effect" | "jti"> & Partial<Pick<CapabilityClaims, "key" | "request_id">>;

/** What a Write asks for. */
export interface WriteAsk {
  /** The request's `key` ("" when absent). */
  key: string;
  /** The request's `request_id` ("" when absent). */
  requestId: string;
  /** Size of the request's payload, in bytes. */
  payloadBytes: number;
}

/** Why a call is refused by the rule (ErrorInfo.reason). */
export type RuleRefusalReason =
  | "KEY_MISSING"
  | "KEY_MISMATCH"
  | "REQUEST_ID_MISSING"
  | "REQUEST_ID_MISMATCH"
  | "EFFECT_CLASS_MISMATCH"
  | "CAPABILITY_REUSED"
  | "PAYLOAD_TOO_LARGE"
  | "SANDBOX_UNSAFE_DENIED"
  | "REPLAY_NO_RECORDED_EFFECT";

/**
 * A refusal. `outside_grant`: a verified capability used for something it does not grant
 * (PERMISSION_DENIED). `malformed`: the request itself is unacceptable (INVALID_ARGUMENT).
 */
export interface RuleRefusal {
  kind: "outside_grant" | "malformed";
  reason: RuleRefusalReason;
  /** One line, safe to return to the caller (never contains a credential). */
  message: string;
}

/**
 * How the write's single effect is claimed.
 * - `effectId`: the entry's `_id`; a second insert under it is a duplicate.
 * - `spendCapability`: the capability id must first be claimed in `capability_uses`
 *   (single-use capabilities whose effect id does not already name the capability).
 * - `duplicateIsReuse`: a collision on `effectId` means the capability was used before,
 *   which is refused rather than answered as a duplicate.
 */
export interface WriteGrant {
  effect: EffectName;
  effectId: string;
  /** Key stored on the entry ("" unless idempotent). */
  key: string;
  /** Request id stored on the entry ("" unless queryable). */
  requestId: string;
  spendCapability: boolean;
  duplicateIsReuse: boolean;
}

export type WriteDecision = { ok: true; grant: WriteGrant } | { ok: false; refusal: RuleRefusal };

export { idempotentEffectId };

/**
 * The entry `_id` of a queryable effect: request ids are scoped by tool, the pair
 * encoded unambiguously (a JSON array: tool ids may contain ":", so `req:<tool>:<request>`
 * let tool `X.bank` with request `transfer:R1` take tool `X.bank:transfer`'s request `R1`).
 */
export function queryableEffectId(toolId: string, requestId: string): string {
  return `req:${JSON.stringify([toolId, requestId])}`;
}

/**
 * The ambiguous id older ledgers wrote. Only read (EntryStore.hasLegacyQueryable), so an
 * effect recorded before the change is still found as the effect it was.
 */
export function legacyQueryableEffectId(toolId: string, requestId: string): string {
  return `req:${toolId}:${requestId}`;
}

/** The entry `_id` of an unsafe effect: one per capability. */
export function unsafeEffectId(jti: string): string {
  return `cap:${jti}`;
}

/** The refusal for a single-use capability presented again. */
export const CAPABILITY_REUSED: RuleRefusal = {
  kind: "outside_grant",
  reason: "CAPABILITY_REUSED",
  message: "this capability was already used for a write; it is single-use",
};

/** The refusal of an Unsafe capability minted for a shadow or replay run (ADR 0028). */
export const SANDBOX_UNSAFE_DENIED: RuleRefusal = {
  kind: "outside_grant",
  reason: "SANDBOX_UNSAFE_DENIED",
  message: "an Unsafe capability of a shadow or replay run grants no effect; Unsafe is denied outright in sandbox runs",
};

/** The refusal of a replay write for an effect the recorded run never made (ADR 0028). */
export const REPLAY_NO_RECORDED_EFFECT: RuleRefusal = {
  kind: "outside_grant",
  reason: "REPLAY_NO_RECORDED_EFFECT",
  message: "a replay capability is answered from the recorded effect, and the ledger holds none for this key or request id; nothing was written",
};

/**
 * Decides a Write. Grant checks come before the payload check, so a caller without the
 * grant learns nothing about the request's other problems.
 */
export function decideWrite(cap: GrantClaims, ask: WriteAsk, maxPayloadBytes: number): WriteDecision {
  const refusal = grantProblem(cap, ask) ?? payloadProblem(ask, maxPayloadBytes);
  if (refusal) return { ok: false, refusal };
  switch (cap.effect) {
    case "idempotent":
      return {
        ok: true,
        grant: { effect: "idempotent", effectId: idempotentEffectId(ask.key), key: ask.key, requestId: "", spendCapability: false, duplicateIsReuse: false },
      };
    case "queryable":
      return {
        ok: true,
        grant: {
          effect: "queryable",
          effectId: queryableEffectId(cap.tool_id, ask.requestId),
          key: "",
          requestId: ask.requestId,
          spendCapability: true,
          duplicateIsReuse: false,
        },
      };
    case "unsafe":
      return {
        ok: true,
        grant: { effect: "unsafe", effectId: unsafeEffectId(cap.jti), key: "", requestId: "", spendCapability: false, duplicateIsReuse: true },
      };
  }
}

/**
 * Decides a LookupRequest: only a queryable capability for that very request id may ask.
 * @returns the entry `_id` to look up, or a refusal.
 */
export function decideLookup(cap: GrantClaims, requestId: string): { ok: true; effectId: string } | { ok: false; refusal: RuleRefusal } {
  if (cap.effect !== "queryable") {
    return refuse("EFFECT_CLASS_MISMATCH", `LookupRequest needs a queryable capability; this one is ${cap.effect}`);
  }
  if (requestId === "") return refuse("REQUEST_ID_MISSING", "request_id is required");
  if (requestId !== cap.request_id) return refuse("REQUEST_ID_MISMATCH", "request_id is not the one bound in the capability");
  return { ok: true, effectId: queryableEffectId(cap.tool_id, requestId) };
}

function grantProblem(cap: GrantClaims, ask: WriteAsk): RuleRefusal | undefined {
  switch (cap.effect) {
    case "idempotent":
      if (ask.requestId !== "") return outside("EFFECT_CLASS_MISMATCH", "request_id is for queryable capabilities; an idempotent write carries key");
      if (ask.key === "") return outside("KEY_MISSING", "key is required: an idempotent write must carry the kernel-derived key");
      if (ask.key !== cap.key) return outside("KEY_MISMATCH", "key is not the one the kernel derived for this call");
      return undefined;
    case "queryable":
      if (ask.key !== "") return outside("EFFECT_CLASS_MISMATCH", "key is for idempotent capabilities; a queryable write carries request_id");
      if (ask.requestId === "") return outside("REQUEST_ID_MISSING", "request_id is required for a queryable write");
      if (ask.requestId !== cap.request_id) return outside("REQUEST_ID_MISMATCH", "request_id is not the one bound in the capability");
      return undefined;
    case "unsafe":
      if (ask.key !== "" || ask.requestId !== "") {
        return outside("EFFECT_CLASS_MISMATCH", "an unsafe capability grants an unkeyed write; key and request_id must be empty");
      }
      return undefined;
  }
}

function payloadProblem(ask: WriteAsk, maxPayloadBytes: number): RuleRefusal | undefined {
  if (ask.payloadBytes <= maxPayloadBytes) return undefined;
  return { kind: "malformed", reason: "PAYLOAD_TOO_LARGE", message: `payload is ${ask.payloadBytes} bytes; the limit is ${maxPayloadBytes}` };
}

function outside(reason: RuleRefusalReason, message: string): RuleRefusal {
  return { kind: "outside_grant", reason, message };
}

function refuse(reason: RuleRefusalReason, message: string): { ok: false; refusal: RuleRefusal } {
  return { ok: false, refusal: outside(reason, message) };
}
