/**
 * The capability contract shared by the kernel (which mints) and the ledger (which
 * verifies). Both sides import these names so that the token format is defined once;
 * docs/decisions/0003-capability-format.md explains the choices.
 */

/** JOSE `typ` header of every capability: a JWT from elsewhere is never mistaken for one. */
export const CAPABILITY_TYP = "keycap-capability+jwt";

/**
 * JOSE `typ` header of a shadow or replay capability (ADR 0028). Another typ than live ones
 * on purpose: a verifier that does not know run modes (an older sink SDK, a third-party
 * sink) refuses it as WRONG_TOKEN_TYPE instead of performing a live effect with it.
 */
export const CAPABILITY_SANDBOX_TYP = "keycap-sandbox-capability+jwt";

/** The run modes a capability's `mode` claim may name; absent means live. */
export const SANDBOX_MODES = ["shadow", "replay"] as const;

/** A sandbox run mode (the `mode` claim). */
export type SandboxMode = (typeof SANDBOX_MODES)[number];

/** The `typ` a capability with these claims is signed under: sandbox iff it has a `mode`. */
export function capabilityTypOf(claims: Pick<CapabilityClaims, "mode">): string {
  return claims.mode === undefined ? CAPABILITY_TYP : CAPABILITY_SANDBOX_TYP;
}

/** The only signature algorithm: Ed25519 (RFC 8037). Pinned, never read from a token. */
export const CAPABILITY_ALG = "EdDSA";

// Lifetimes are configuration defaults and effect names the declaration's vocabulary: both
// live below this module (services/common), which configuration and storage read too.
export {
  CLOCK_TOLERANCE_SECONDS,
  DEFAULT_AUDIENCE,
  DEFAULT_ISSUER,
  DEFAULT_LIFETIME_SECONDS,
  MAX_LIFETIME_SECONDS,
} from "../../common/src/capability-lifetime";
export { EFFECT_NAMES, type EffectName } from "../../common/src/effect-kind";
import { EFFECT_NAMES, type EffectName } from "../../common/src/effect-kind";

/**
 * The claims of a capability. Snake case because these are wire names in the JWT.
 * `key` is present if and only if `effect` is "idempotent"; `request_id` if and only if
 * `effect` is "queryable". Times are NumericDate (whole seconds since the epoch).
 */
export interface CapabilityClaims {
  /** Issuer: the kernel. */
  iss: string;
  /** Audience: the ledger. Always a single string, never an array. */
  aud: string;
  /** The principal (agent runtime) that began the call (DESIGN §9). */
  sub: string;
  /** The registered tool the capability was minted for. */
  tool_id: string;
  /** The tool's declared effect class. */
  effect: EffectName;
  /** The kernel's call id; stable across attempts of one call. */
  call_id: string;
  /** Attempt number of the call, starting at 1. */
  attempt: number;
  /** Capability id, unique per minted capability (single-use checks key on it). */
  jti: string;
  /** Kernel-derived idempotency key (idempotent only). */
  key?: string;
  /** Request id the write must carry (queryable only). */
  request_id?: string;
  /**
   * How `key` was derived (idempotent only): with the arguments a sink receives, it lets the
   * sink re-derive the key and refuse a capability carrying another call's arguments (ADR 0026).
   * Absent on capabilities minted before it existed.
   */
  derivation?: DerivationClaim;
  /**
   * The run mode when not live (ADR 0028): "shadow" or "replay". Present exactly when the
   * token's `typ` is {@link CAPABILITY_SANDBOX_TYP}; absent means live.
   */
  mode?: SandboxMode;
  /** Issued at, seconds since the epoch. */
  iat: number;
  /** Expiry, seconds since the epoch. */
  exp: number;
}

/**
 * The `derivation` claim: the key's canonical document (ADR 0002) without the field values,
 * which come from the call's arguments. `context` holds exactly the context fields the
 * derivation names, with the values the kernel derived with.
 */
export interface DerivationClaim {
  /** The derivation version hashed (≥ 1). */
  version: number;
  /** RFC 6901 pointers exactly as registered. */
  fields: string[];
  /** `{ run_id }` when the derivation names the run id; else `{}`. */
  context: { run_id?: string };
}

/** Claims every capability must carry, whatever its effect. */
export const REQUIRED_CLAIMS: readonly string[] = ["iss", "aud", "sub", "tool_id", "effect", "call_id", "attempt", "jti", "iat", "exp"];

/** What is wrong with a claims object: a claim that is absent, or present with a bad value. */
export interface ClaimProblem {
  kind: "missing" | "invalid";
  claim: string;
  /** Human-readable, never contains the claim's value. */
  detail: string;
}

/**
 * Checks the shape of a claims object against the contract. Used by the minter (so it
 * never signs something the ledger would refuse) and by the verifier (after the signature
 * holds), so both sides agree on one definition.
 *
 * @returns the first problem found, or undefined when `value` is a valid {@link CapabilityClaims}.
 */
export function findClaimProblem(value: Record<string, unknown>): ClaimProblem | undefined {
  for (const claim of REQUIRED_CLAIMS) {
    if (!Object.hasOwn(value, claim) || value[claim] === undefined) {
      return { kind: "missing", claim, detail: `capability claim "${claim}" is missing` };
    }
  }
  for (const claim of ["iss", "aud", "sub", "tool_id", "call_id", "jti"]) {
    if (!isNonEmptyString(value[claim])) {
      return { kind: "invalid", claim, detail: `capability claim "${claim}" must be a non-empty string` };
    }
  }
  const effect = value["effect"];
  if (typeof effect !== "string" || !(EFFECT_NAMES as readonly string[]).includes(effect)) {
    return { kind: "invalid", claim: "effect", detail: `capability claim "effect" must be one of ${EFFECT_NAMES.join(", ")}` };
  }
  const attempt = value["attempt"];
  if (typeof attempt !== "number" || !Number.isSafeInteger(attempt) || attempt < 1) {
    return { kind: "invalid", claim: "attempt", detail: `capability claim "attempt" must be a positive integer` };
  }
  for (const claim of ["iat", "exp"]) {
    const t = value[claim];
    // Whole seconds only: the kernel never mints fractions, so one is a forgery or a bug.
    if (typeof t !== "number" || !Number.isSafeInteger(t) || t < 0) {
      return { kind: "invalid", claim, detail: `capability claim "${claim}" must be a whole number of seconds` };
    }
  }
  if ((value["exp"] as number) <= (value["iat"] as number)) {
    return { kind: "invalid", claim: "exp", detail: `capability claim "exp" must be after "iat"` };
  }
  // The grant is the pairing of effect and key/request id: a stray key on an unsafe
  // capability would let a reader believe a write is keyed when nothing enforces it.
  const mode = value["mode"];
  if (mode !== undefined && !(SANDBOX_MODES as readonly unknown[]).includes(mode)) {
    return { kind: "invalid", claim: "mode", detail: `capability claim "mode" must be one of ${SANDBOX_MODES.join(", ")} (absent: live)` };
  }
  const keyProblem = pairedClaimProblem(value, "key", effect === "idempotent", "idempotent");
  if (keyProblem) return keyProblem;
  const derivationProblem = findDerivationProblem(value["derivation"], effect === "idempotent");
  if (derivationProblem) return derivationProblem;
  return pairedClaimProblem(value, "request_id", effect === "queryable", "queryable");
}

/** The `derivation` claim is optional, allowed on idempotent capabilities only, and exactly shaped. */
function findDerivationProblem(d: unknown, allowed: boolean): ClaimProblem | undefined {
  if (d === undefined) return undefined;
  const invalid = (detail: string): ClaimProblem => ({ kind: "invalid", claim: "derivation", detail: `capability claim "derivation" ${detail}` });
  if (!allowed) return invalid("is only allowed when effect is idempotent");
  if (typeof d !== "object" || d === null || Array.isArray(d)) return invalid("must be an object");
  const { version, fields, context, ...rest } = d as Record<string, unknown>;
  if (Object.keys(rest).length > 0) return invalid("has a member other than version, fields and context");
  if (typeof version !== "number" || !Number.isSafeInteger(version) || version < 1) return invalid("version must be a positive integer");
  if (!Array.isArray(fields) || fields.length === 0 || !fields.every((f) => typeof f === "string"))
    return invalid("fields must be a non-empty array of pointers");
  if (typeof context !== "object" || context === null || Array.isArray(context)) return invalid("context must be an object");
  const { run_id: runId, ...otherContext } = context as Record<string, unknown>;
  if (Object.keys(otherContext).length > 0 || (runId !== undefined && typeof runId !== "string")) return invalid("context may hold only run_id, a string");
  return undefined;
}

function pairedClaimProblem(value: Record<string, unknown>, claim: string, required: boolean, effect: EffectName): ClaimProblem | undefined {
  const present = Object.hasOwn(value, claim) && value[claim] !== undefined;
  if (required && !present) {
    return { kind: "missing", claim, detail: `capability claim "${claim}" is required when effect is ${effect}` };
  }
  if (!required && present) {
    return { kind: "invalid", claim, detail: `capability claim "${claim}" is only allowed when effect is ${effect}` };
  }
  if (present && !isNonEmptyString(value[claim])) {
    return { kind: "invalid", claim, detail: `capability claim "${claim}" must be a non-empty string` };
  }
  return undefined;
}

function isNonEmptyString(v: unknown): v is string {
  return typeof v === "string" && v.length > 0;
}

// RFC 6750 §2.1: the scheme is case-insensitive, the credential is a b64token. Anchored
// and linear, so a hostile header cannot make it backtrack.
