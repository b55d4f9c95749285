/**
 * The ledger's one way to check a capability. Fails closed: anything not positively
 * verified is a {@link CapabilityRefusal} with a machine-readable reason.
 *
 * Profile (docs/decisions/0003-capability-format.md): compact JWS only; protected header
 * exactly { alg: "EdDSA", typ: "keycap-capability+jwt", kid }; the algorithm is pinned
 * here, never chosen by the token; keys come from a {@link PublicKeySource} by kid and
 * are parsed once; the token is parsed once, strictly; the signature is checked with
 * node:crypto's Ed25519, then the claims against the shared contract.
 *
 * Neither messages nor errors ever carry the raw capability: it is a bearer credential.
 */
import { isUtf8 } from "node:buffer";
import type { KeyObject } from "node:crypto";
import {
  CAPABILITY_ALG,
  CAPABILITY_SANDBOX_TYP,
  CAPABILITY_TYP,
  CLOCK_TOLERANCE_SECONDS,
  DEFAULT_AUDIENCE,
  DEFAULT_ISSUER,
  MAX_LIFETIME_SECONDS,
  findClaimProblem,
  type CapabilityClaims,
} from "./claims";
import { parseBearer } from "../../common/src/bearer";
import { KeycapError } from "../../common/src/errors";
import {
  keysUnavailable,
  readUnverifiedInfo,
  refuseCapability,
  type CapabilityRefusal,
  type UnauthenticatedReason,
  type UnverifiedCapabilityInfo,
} from "./refusal";
import { parseCompactJws, type ParsedCompactJws } from "./compact-jws";
import { verifyEd25519 } from "./ed25519";
import type { PublicKeySource } from "./key-sources/public-key-source";
import { Reasons } from "../../common/src/refuse";

/** A verified capability: the typed claims plus the id of the key that signed it. */
export type VerifiedCapability = CapabilityClaims & { kid: string };

/** Options for {@link CapabilityVerifier}. */
export interface CapabilityVerifierOptions {
  /** Expected `iss`. Default {@link DEFAULT_ISSUER}. */
  issuer?: string;
  /** Expected `aud` (this ledger). Default {@link DEFAULT_AUDIENCE}. */
  audience?: string;
  /** Largest accepted token, in bytes. Default 4096. */
  maxTokenBytes?: number;
  /** Largest accepted `exp - iat`, and oldest accepted `iat` (token age), in seconds. Default 900. */
  maxLifetimeSeconds?: number;
  /** Clock skew tolerated on `exp`, `nbf` and `iat`, in seconds. Default 5. */
  clockToleranceSeconds?: number;
  /** Clock, in milliseconds since the epoch (like `Date.now`). Default `Date.now`. */
  now?: () => number;
  /**
   * Shadow and replay capabilities (typ {@link CAPABILITY_SANDBOX_TYP}, ADR 0028): "refuse"
   * (the default) refuses them WRONG_TOKEN_TYPE, as every verifier that does not know run
   * modes does; "verify" verifies them and returns their `mode`, for a caller that then
   * applies the mode (the ledger writes nothing live for them; a sink refuses them).
   */
  sandbox?: "refuse" | "verify";
}

// Header members the profile allows. Anything else (jku, jwk, x5u, crit, b64...) would
// ask the verifier to do something this profile never does, so it is refused outright.
const ALLOWED_HEADER_MEMBERS = new Set(["alg", "typ", "kid"]);

// Required claims are checked for presence before any value, in this order (the order this
// verifier has always used, so a token missing several is refused naming the same one).
// findClaimProblem then checks the contract's full list, so a claim added there is not
// missed if it is forgotten here.
const PRESENCE_ORDER = ["iss", "aud", "iat", "exp", "jti", "attempt", "call_id", "effect", "tool_id", "sub"] as const;

/**
 * Verifies `authorization: Bearer <capability>` metadata values.
 *
 * @example
 * const verifier = new CapabilityVerifier(new RemoteJwksSource(fetchJwks), {});
 * const cap = await verifier.verify(metadata.get("authorization")[0]?.toString());
 */
export class CapabilityVerifier {
  private readonly issuer: string;
  private readonly audience: string;
  private readonly maxTokenBytes: number;
  private readonly maxLifetimeSeconds: number;
  private readonly clockToleranceSeconds: number;
  private readonly now: () => number;
  private readonly acceptedTyps: readonly string[];

  constructor(
    private readonly source: PublicKeySource,
    opts: CapabilityVerifierOptions = {},
  ) {
    this.issuer = opts.issuer ?? DEFAULT_ISSUER;
    this.audience = opts.audience ?? DEFAULT_AUDIENCE;
    this.maxTokenBytes = opts.maxTokenBytes ?? 4096;
    this.maxLifetimeSeconds = opts.maxLifetimeSeconds ?? MAX_LIFETIME_SECONDS;
    this.clockToleranceSeconds = opts.clockToleranceSeconds ?? CLOCK_TOLERANCE_SECONDS;
    this.now = opts.now ?? Date.now;
    this.acceptedTyps = opts.sandbox === "verify" ? [CAPABILITY_TYP, CAPABILITY_SANDBOX_TYP] : [CAPABILITY_TYP];
    for (const [name, v] of [
      ["maxTokenBytes", this.maxTokenBytes],
      ["maxLifetimeSeconds", this.maxLifetimeSeconds],
      ["clockToleranceSeconds", this.clockToleranceSeconds],
    ] as const) {
      if (!Number.isFinite(v) || v < 0) throw new RangeError(`${name} must be a non-negative number`);
    }
  }

  /**
   * Verifies a capability from an `authorization` metadata value.
   *
   * @throws CapabilityRefusal on any failure; nothing else escapes.
   */
  async verify(authorization: string | undefined): Promise<VerifiedCapability> {
    const token = this.bearerToken(authorization);
    // Header and payload are decoded and parsed once, here; the same objects are checked
    // after the signature. Nothing read from them is trusted before that.
    const jws = parseCompactJws(token);
    if ("problem" in jws) {
      throw refuseCapability(
        Reasons.CAPABILITY_MALFORMED,
        jws.problem === "not-compact" ? "capability is not a compact JWS (three base64url parts)" : "capability is not canonical base64url",
      );
    }
    const unverified = readUnverifiedInfo(jws.header, jws.payload);
    const kid = checkHeader(jws, unverified, this.acceptedTyps);
    await this.checkSignature(jws, kid, unverified);

    // From here on the signature holds: the claims are the kernel's own words, and every
    // refusal says so (signatureVerified).
    if (!jws.payload || !isUtf8(jws.payloadBytes)) {
      throw refuseCapability(Reasons.CAPABILITY_MALFORMED, "capability payload is not a JSON object", unverified, {}, true);
    }
    const claims = this.checkClaims(jws.payload, unverified);
    // The typ and the mode claim say the same thing, or the token is not the kernel's kind:
    // a live typ with a mode (an older verifier would take it as live) or a sandbox typ without one.
    if ((jws.header?.["typ"] === CAPABILITY_SANDBOX_TYP) !== (claims.mode !== undefined)) {
      throw refuseCapability(
        Reasons.CLAIM_INVALID,
        `capability claim "mode" must be present exactly when typ is ${CAPABILITY_SANDBOX_TYP}`,
        unverified,
        { claim: "mode" },
        true,
      );
    }
    return verifiedOf(claims, kid);
  }

  /** The token of a Bearer `authorization` value, refused when absent, oversized or not Bearer. */
  private bearerToken(authorization: string | undefined): string {
    if (authorization === undefined || authorization.trim() === "") {
      throw refuseCapability(Reasons.CAPABILITY_MISSING, "no capability: expected authorization: Bearer <capability>");
    }
    // Checked before any parsing, so an oversized header costs nothing but its length.
    if (authorization.length > this.maxTokenBytes + 64) {
      throw refuseCapability(Reasons.CAPABILITY_TOO_LARGE, `capability is larger than ${this.maxTokenBytes} bytes`);
    }
    const token = parseBearer(authorization);
    if (token === undefined) throw refuseCapability(Reasons.CAPABILITY_MALFORMED, "authorization is not a Bearer credential");
    // The token is ASCII by now, so its length is its size in bytes.
    if (token.length > this.maxTokenBytes) {
      throw refuseCapability(Reasons.CAPABILITY_TOO_LARGE, `capability is larger than ${this.maxTokenBytes} bytes`);
    }
    return token;
  }

  /** Looks the key up by kid and checks the Ed25519 signature over the token as it came. */
  private async checkSignature(jws: ParsedCompactJws, kid: string, unverified: UnverifiedCapabilityInfo): Promise<void> {
    const refuse = (reason: UnauthenticatedReason, message: string): CapabilityRefusal => refuseCapability(reason, message, unverified);
    let key: KeyObject | undefined;
    try {
      key = await this.source.getKey(kid);
    } catch (err) {
      // Fail closed, but honestly: the ledger could not check, which is not the tool's fault.
      throw keysUnavailable(err instanceof KeycapError ? err.message : "the signing key source failed", unverified);
    }
    if (!key) throw refuse(Reasons.UNKNOWN_KEY_ID, "capability is signed with a key id this ledger does not know");

    // We verify with libsodium directly rather than through a JOSE library: there is one
    // pinned algorithm, the key is parsed once by the source, and the payload is parsed
    // once above, so all a library would add is a second decode and an async WebCrypto
    // round trip; and libsodium's Ed25519 costs half of OpenSSL's (ADR 0003). Pinning the
    // algorithm means pinning the key type too.
    if (key.type !== "public" || key.asymmetricKeyType !== "ed25519") throw refuse(Reasons.BAD_SIGNATURE, "capability could not be verified");
    // Checked here rather than at decoding so that a header with stray bytes keeps the
    // reason it has always had (its typ, its unknown kid...).
    if (!isUtf8(jws.headerBytes)) throw refuse(Reasons.CAPABILITY_MALFORMED, "capability header is not valid UTF-8");
    let signatureHolds: boolean;
    try {
      signatureHolds = verifyEd25519(Buffer.from(jws.headerB64 + "." + jws.payloadB64, "ascii"), Buffer.from(jws.signatureB64, "base64url"), key);
    } catch (err) {
      // Fail closed. The key checks' errors never quote the data, so the cause can be logged.
      const refusal = refuse(Reasons.BAD_SIGNATURE, "capability could not be verified");
      (refusal as { cause?: unknown }).cause = err;
      throw refusal;
    }
    if (!signatureHolds) throw refuse(Reasons.BAD_SIGNATURE, "capability signature does not verify");
  }

  /**
   * The claim rules, in a fixed order so that a token breaking several gets the same
   * reason every time: presence, issuer, audience, the clock (nbf, exp, age, iat in the
   * future), then the shared contract (types, pairing) and the lifetime. Called only
   * after the signature holds; every refusal is marked signatureVerified.
   */
  private checkClaims(payload: Record<string, unknown>, unverified: UnverifiedCapabilityInfo): CapabilityClaims {
    const refuseVerified = (reason: UnauthenticatedReason, message: string, metadata: Record<string, string> = {}): CapabilityRefusal =>
      refuseCapability(reason, message, unverified, metadata, true);

    for (const claim of PRESENCE_ORDER) {
      if (!Object.hasOwn(payload, claim)) throw refuseVerified("CLAIM_MISSING", `capability claim "${claim}" is missing`, { claim });
    }
    if (payload["iss"] !== this.issuer) {
      throw refuseVerified("WRONG_ISSUER", "capability was not issued by the expected kernel");
    }
    const aud = payload["aud"];
    if (aud !== this.audience && !(Array.isArray(aud) && aud.includes(this.audience))) {
      throw refuseVerified("WRONG_AUDIENCE", "capability is not addressed to this ledger");
    }

    // NumericDate comparisons in whole seconds, skew tolerated both ways.
    const now = Math.floor(this.now() / 1000);
    // A broken clock would make every comparison below false, i.e. pass: fail closed. The
    // token is not at fault and nothing about it is vouched for, hence not refuseVerified.
    if (!Number.isFinite(now)) throw refuseCapability(Reasons.BAD_SIGNATURE, "capability could not be verified", unverified);
    const tolerance = this.clockToleranceSeconds;
    const { iat, nbf, exp } = payload;
    if (typeof iat !== "number") throw refuseVerified("CLAIM_INVALID", `capability claim "iat" must be a number`, { claim: "iat" });
    if (nbf !== undefined && typeof nbf !== "number") {
      throw refuseVerified("CLAIM_INVALID", `capability claim "nbf" must be a number`, { claim: "nbf" });
    }
    if (nbf !== undefined && nbf > now + tolerance) throw refuseVerified("NOT_YET_VALID", "capability is not valid yet (nbf)");
    if (typeof exp !== "number") throw refuseVerified("CLAIM_INVALID", `capability claim "exp" must be a number`, { claim: "exp" });
    if (exp <= now - tolerance) throw refuseVerified("EXPIRED", "capability has expired");
    // Age bounds replay of an old token even if its exp were far off; a future iat means
    // the kernel's clock and ours disagree by more than the tolerance.
    const age = now - iat;
    if (age - tolerance > this.maxLifetimeSeconds) throw refuseVerified("EXPIRED", "capability has expired");
    if (age < -tolerance) throw refuseVerified("NOT_YET_VALID", "capability is not valid yet (issued in the future)");

    if (typeof aud !== "string") {
      // An array naming this ledger passed the check above; the profile says one string,
      // so a token meant for several parties is not accepted as ours. Refused only now,
      // after the clock, so that such a token keeps the reason it has always had.
      throw refuseVerified("WRONG_AUDIENCE", "capability audience must be a single string");
    }
    const problem = findClaimProblem(payload);
    if (problem) {
      throw refuseVerified(problem.kind === "missing" ? "CLAIM_MISSING" : "CLAIM_INVALID", problem.detail, { claim: problem.claim });
    }
    const claims = payload as unknown as CapabilityClaims;
    if (claims.exp - claims.iat > this.maxLifetimeSeconds) {
      throw refuseVerified("LIFETIME_TOO_LONG", `capability lifetime exceeds ${this.maxLifetimeSeconds} s`);
    }
    return claims;
  }
}

/**
 * The protected header's rules, before any key is looked up. The algorithm is decided here,
 * not by the token: anything but the exact string "EdDSA" (none, HS256 keyed with our public
 * key, "eddsa"...) is refused. Returns the key id.
 */
function checkHeader(jws: ParsedCompactJws, unverified: UnverifiedCapabilityInfo, typs: readonly string[]): string {
  const refuse = (reason: UnauthenticatedReason, message: string): CapabilityRefusal => refuseCapability(reason, message, unverified);
  const header = jws.header;
  if (!header) throw refuse(Reasons.CAPABILITY_MALFORMED, "capability header is not a JSON object");
  if (header["alg"] !== CAPABILITY_ALG) throw refuse(Reasons.ALGORITHM_NOT_ALLOWED, `capability algorithm must be ${CAPABILITY_ALG}`);
  if (!typs.includes(header["typ"] as string)) throw refuse(Reasons.WRONG_TOKEN_TYPE, `capability typ must be ${typs.join(" or ")}`);
  const kid = header["kid"];
  if (typeof kid !== "string" || kid.length === 0) throw refuse(Reasons.CAPABILITY_MALFORMED, "capability header has no key id (kid)");
  for (const member of Object.keys(header)) {
    if (!ALLOWED_HEADER_MEMBERS.has(member)) {
      throw refuse(Reasons.CAPABILITY_MALFORMED, `capability header member "${member.slice(0, 32)}" is not allowed`);
    }
  }
  if (jws.signatureB64.length === 0) throw refuse(Reasons.CAPABILITY_MALFORMED, "capability has no signature");
  return kid;
}

/** The verified claims, copied member by member so nothing unchecked rides along. */
function verifiedOf(claims: CapabilityClaims, kid: string): VerifiedCapability {
  const verified: VerifiedCapability = {
    iss: claims.iss,
    aud: claims.aud,
    sub: claims.sub,
    tool_id: claims.tool_id,
    effect: claims.effect,
    call_id: claims.call_id,
    attempt: claims.attempt,
    jti: claims.jti,
    iat: claims.iat,
    exp: claims.exp,
    kid,
  };
  if (claims.key !== undefined) verified.key = claims.key;
  if (claims.request_id !== undefined) verified.request_id = claims.request_id;
  if (claims.derivation !== undefined) verified.derivation = claims.derivation;
  if (claims.mode !== undefined) verified.mode = claims.mode;
  return verified;
}
