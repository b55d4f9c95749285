/**
 * Why a capability was refused: the reason codes, the error the ledger throws, and what the
 * token says about itself (read without trust) for the refusal record.
 *
 * Neither messages nor errors ever carry the raw capability: it is a bearer credential.
 */
import { KeycapError, type KeycapCode } from "../../common/src/errors";
import { REASON_CODES, Reasons } from "../../common/src/refuse";

/**
 * Every reason a capability can be refused with (ErrorInfo.reason); ADR 0003 says when
 * each is given (docs/decisions/0003-capability-format.md).
 */
export const CAPABILITY_REFUSAL_REASONS = [
  "CAPABILITY_MISSING",
  "CAPABILITY_MALFORMED",
  "CAPABILITY_TOO_LARGE",
  "ALGORITHM_NOT_ALLOWED",
  "WRONG_TOKEN_TYPE",
  "UNKNOWN_KEY_ID",
  "BAD_SIGNATURE",
  "EXPIRED",
  "NOT_YET_VALID",
  "WRONG_ISSUER",
  "WRONG_AUDIENCE",
  "CLAIM_MISSING",
  "CLAIM_INVALID",
  "LIFETIME_TOO_LONG",
  "SIGNING_KEYS_UNAVAILABLE",
] as const;

/** Every reason a capability can be refused with (ErrorInfo.reason). */
export type CapabilityRefusalReason = (typeof CAPABILITY_REFUSAL_REASONS)[number];

/** Every reason but SIGNING_KEYS_UNAVAILABLE (which is UNAVAILABLE, not UNAUTHENTICATED). */
export type UnauthenticatedReason = Exclude<CapabilityRefusalReason, "SIGNING_KEYS_UNAVAILABLE">;

/**
 * What the token says about itself, read WITHOUT trusting it, for the refusal record
 * (which tool tried, with which key). Only short string values are kept.
 */
export type UnverifiedCapabilityInfo = Partial<{
  toolId: string;
  callId: string;
  jti: string;
  kid: string;
  effect: string;
  key: string;
  requestId: string;
}>;

/**
 * A capability was refused, with the code the reason catalogue gives its reason:
 * UNAUTHENTICATED, except UNAVAILABLE for SIGNING_KEYS_UNAVAILABLE (the ledger could not
 * check; the caller may retry).
 */
export class CapabilityRefusal extends KeycapError {
  constructor(
    override readonly reason: CapabilityRefusalReason,
    message: string,
    metadata: Record<string, string>,
    /** Decoded without trust, best effort; never the raw token. */
    readonly unverified: UnverifiedCapabilityInfo,
    /**
     * True when the refusal came after the signature checked out (expired, wrong audience,
     * bad claims...): `unverified` then names the tool reliably.
     */
    readonly signatureVerified: boolean,
  ) {
    super(REASON_CODES[reason] as KeycapCode, reason, message, metadata);
    this.name = "CapabilityRefusal";
  }
}

/**
 * An UNAUTHENTICATED refusal: the token itself is at fault.
 *
 * @example throw refuseCapability(Reasons.EXPIRED, "capability has expired", unverified, {}, true);
 */
export function refuseCapability(
  reason: UnauthenticatedReason,
  message: string,
  unverified: UnverifiedCapabilityInfo = {},
  metadata: Record<string, string> = {},
  signatureVerified = false,
): CapabilityRefusal {
  return new CapabilityRefusal(reason, message, metadata, unverified, signatureVerified);
}

/**
 * An UNAVAILABLE refusal (SIGNING_KEYS_UNAVAILABLE): the ledger could not learn the keys,
 * which is not the tool's fault, so the caller may retry.
 */
export function keysUnavailable(message: string, unverified: UnverifiedCapabilityInfo): CapabilityRefusal {
  return new CapabilityRefusal(Reasons.SIGNING_KEYS_UNAVAILABLE, message, {}, unverified, false);
}

// Longest string copied into `unverified`: enough for any real id or key, short enough
// that a hostile token cannot bloat the refusal record.
const MAX_UNVERIFIED_FIELD = 256;

/**
 * Picks the refusal record's fields out of a decoded (not verified) header and payload:
 * non-empty strings of at most 256 characters, anything else left out.
 */
export function readUnverifiedInfo(header: Record<string, unknown> | undefined, payload: Record<string, unknown> | undefined): UnverifiedCapabilityInfo {
  const out: UnverifiedCapabilityInfo = {};
  const pick = (src: Record<string, unknown> | undefined, name: string): string | undefined => {
    const v = src?.[name];
    return typeof v === "string" && v.length > 0 && v.length <= MAX_UNVERIFIED_FIELD ? v : undefined;
  };
  const set = (field: keyof UnverifiedCapabilityInfo, v: string | undefined): void => {
    if (v !== undefined) out[field] = v;
  };
  set("kid", pick(header, "kid"));
  set("toolId", pick(payload, "tool_id"));
  set("callId", pick(payload, "call_id"));
  set("jti", pick(payload, "jti"));
  set("effect", pick(payload, "effect"));
  set("key", pick(payload, "key"));
  set("requestId", pick(payload, "request_id"));
  return out;
}
