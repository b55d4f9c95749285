/**
 * The ledger's one way to check a capability. Fails closed: anything not positively
 * verified is a {@link CapabilityRefusal} with a machine-readable reason.
 *
 * Profile (docs/decisions/0003-capability-format.md): compact JWS only; protected header
 * exactly { alg: "EdDSA", typ: "keycap-capability+jwt", kid }; the algorithm is pinned
 * here, never chosen by the token; keys come from a {@link PublicKeySource} by kid and
 * are parsed once; claims are checked after the signature against the shared contract.
 *
 * Neither messages nor errors ever carry the raw capability: it is a bearer credential.
 */
import { status } from "@grpc/grpc-js";
import { createPublicKey, type KeyObject } from "node:crypto";
import { open } from "node:fs/promises";
import { errors as joseErrors, jwtVerify } from "jose";
import {
  CAPABILITY_ALG,
  CAPABILITY_TYP,
  CLOCK_TOLERANCE_SECONDS,
  DEFAULT_AUDIENCE,
  DEFAULT_ISSUER,
  MAX_LIFETIME_SECONDS,
  REQUIRED_CLAIMS,
  findClaimProblem,
  parseBearer,
  type CapabilityClaims,
} from "../../common/src/capability";
import { KeycapError, type KeycapCode } from "../../common/src/errors";

/** Every reason a capability can be refused with (ErrorInfo.reason). */
export type CapabilityRefusalReason =
  | "CAPABILITY_MISSING"
  | "CAPABILITY_MALFORMED"
  | "CAPABILITY_TOO_LARGE"
  | "ALGORITHM_NOT_ALLOWED"
  | "WRONG_TOKEN_TYPE"
  | "UNKNOWN_KEY_ID"
  | "BAD_SIGNATURE"
  | "EXPIRED"
  | "NOT_YET_VALID"
  | "WRONG_ISSUER"
  | "WRONG_AUDIENCE"
  | "CLAIM_MISSING"
  | "CLAIM_INVALID"
  | "LIFETIME_TOO_LONG"
  | "SIGNING_KEYS_UNAVAILABLE";

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
 * A capability was refused. Code UNAUTHENTICATED, except UNAVAILABLE for
 * SIGNING_KEYS_UNAVAILABLE (the ledger could not check; the caller may retry).
 */
export class CapabilityRefusal extends KeycapError {
  constructor(
    code: KeycapCode,
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
    super(code, reason, message, metadata);
    this.name = "CapabilityRefusal";
  }
}

/** A verified capability: the typed claims plus the id of the key that signed it. */
export type VerifiedCapability = CapabilityClaims & { kid: string };

/** Where the verifier gets public keys. Implementations parse key material once. */
export interface PublicKeySource {
  /**
   * @returns the key for `kid`, or undefined when the source does not know it.
   * @throws KeycapError UNAVAILABLE / SIGNING_KEYS_UNAVAILABLE when it cannot tell.
   */
  getKey(kid: string): Promise<KeyObject | undefined>;
}

/** A JWKS was refused as a key source (file sources throw this at load). */
export class JwksError extends Error {
  constructor(message: string) {
    super(message.replace(/[\r\n]+/g, " "));
    this.name = "JwksError";
  }
}

/**
 * Parses a JWKS into public Ed25519 KeyObjects by kid. Refuses the whole set when any key
 * holds private material or is not OKP/Ed25519: such a set is a configuration mistake
 * (a private key published, or the wrong issuer), and quietly skipping keys would hide it.
 *
 * @throws JwksError with a one-line description of the first problem.
 */
export function parseJwks(json: string): Map<string, KeyObject> {
  let raw: unknown;
  try {
    raw = JSON.parse(json);
  } catch {
    // Not echoing the parser's message: it quotes the input, which may hold a private key.
    throw new JwksError("JWKS is not valid JSON");
  }
  if (!isRecord(raw) || !Array.isArray(raw["keys"])) throw new JwksError(`JWKS must be an object with a "keys" array`);
  const keys = new Map<string, KeyObject>();
  for (const [i, k] of (raw["keys"] as unknown[]).entries()) {
    const where = `JWKS key ${i}`;
    if (!isRecord(k)) throw new JwksError(`${where} is not an object`);
    for (const privateMember of ["d", "p", "q", "dp", "dq", "qi", "k", "priv"]) {
      if (privateMember in k) throw new JwksError(`${where} holds private key material ("${privateMember}"); publish public keys only`);
    }
    if (k["kty"] !== "OKP" || k["crv"] !== "Ed25519") throw new JwksError(`${where} is not an Ed25519 key (need kty "OKP", crv "Ed25519")`);
    const kid = k["kid"];
    if (typeof kid !== "string" || kid.length === 0) throw new JwksError(`${where} has no "kid"`);
    if (k["alg"] !== undefined && k["alg"] !== CAPABILITY_ALG) throw new JwksError(`${where} has alg other than "${CAPABILITY_ALG}"`);
    if (k["use"] !== undefined && k["use"] !== "sig") throw new JwksError(`${where} has use other than "sig"`);
    if (typeof k["x"] !== "string" || !/^[A-Za-z0-9_-]{43}$/.test(k["x"])) throw new JwksError(`${where} has no valid public key ("x")`);
    if (keys.has(kid)) throw new JwksError(`JWKS repeats kid ${kid}`);
    try {
      keys.set(kid, createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: k["x"] }, format: "jwk" }));
    } catch {
      throw new JwksError(`${where} is not a usable Ed25519 public key`);
    }
  }
  return keys;
}

/** Options for {@link RemoteJwksSource}. */
export interface RemoteJwksSourceOptions {
  /** Least time between two fetches, in milliseconds. Default 5000. */
  refetchCooldownMs?: number;
  /** Clock, in milliseconds since the epoch (like `Date.now`). Default `Date.now`. */
  now?: () => number;
}

/**
 * Keys fetched from the kernel (GetSigningKeys), cached by kid. An unknown kid triggers a
 * refetch (that is how a rotated-in key is learned), at most once per cooldown, so a flood
 * of tokens with made-up kids cannot turn into a flood of kernel calls. Concurrent
 * lookups share one in-flight fetch.
 *
 * A kid is reported unknown only while the latest fetch succeeded. If it failed, the
 * ledger cannot tell a forged kid from a freshly rotated one, so it answers UNAVAILABLE
 * (retry later) rather than accuse the tool.
 */
export class RemoteJwksSource implements PublicKeySource {
  private keys = new Map<string, KeyObject>();
  private lastFetchAt: number | undefined;
  private lastFetchError: string | undefined;
  private inFlight: Promise<void> | undefined;
  private readonly cooldownMs: number;
  private readonly now: () => number;

  /**
   * @param fetchJwksJson returns the JWKS as JSON text (e.g. from GetSigningKeys).
   */
  constructor(
    private readonly fetchJwksJson: () => Promise<string>,
    opts: RemoteJwksSourceOptions = {},
  ) {
    this.cooldownMs = opts.refetchCooldownMs ?? 5000;
    this.now = opts.now ?? Date.now;
    if (!Number.isFinite(this.cooldownMs) || this.cooldownMs < 0) throw new RangeError("refetchCooldownMs must be >= 0");
  }

  /** @inheritdoc */
  async getKey(kid: string): Promise<KeyObject | undefined> {
    const cached = this.keys.get(kid);
    if (cached) return cached;
    if (this.inFlight) {
      await this.inFlight;
    } else if (this.lastFetchAt === undefined || this.now() - this.lastFetchAt >= this.cooldownMs) {
      this.inFlight = this.refetch().finally(() => {
        this.inFlight = undefined;
      });
      await this.inFlight;
    }
    const key = this.keys.get(kid);
    if (key) return key;
    if (this.lastFetchError !== undefined) {
      throw new KeycapError(
        status.UNAVAILABLE,
        "SIGNING_KEYS_UNAVAILABLE",
        `the kernel's signing keys could not be fetched: ${this.lastFetchError}`,
      );
    }
    return undefined;
  }

  private async refetch(): Promise<void> {
    this.lastFetchAt = this.now();
    try {
      const json = await this.fetchJwksJson();
      // Replace, not merge: a key the kernel stopped publishing (retired past its grace
      // period) must stop verifying here too.
      this.keys = parseJwks(json);
      this.lastFetchError = undefined;
    } catch (err) {
      // Keep the keys we had: the kernel being briefly unreachable must not stop the
      // ledger from verifying capabilities signed with keys it already knows.
      this.lastFetchError = err instanceof JwksError ? err.message : "fetch failed";
    }
  }
}

/** A static JWKS read from a file once at start; for deployments without a kernel link. */
export class FileJwksSource implements PublicKeySource {
  private constructor(private readonly keys: ReadonlyMap<string, KeyObject>) {}

  /**
   * Reads and validates the JWKS file.
   *
   * @throws JwksError (one line, naming the path) when the file is unreadable, not a
   *   JWKS, empty, holds private material, or holds a non-Ed25519 key.
   */
  static async load(path: string): Promise<FileJwksSource> {
    let text: string;
    try {
      const fh = await open(path, "r");
      try {
        const st = await fh.stat();
        if (st.size > 1024 * 1024) throw new JwksError(`JWKS file ${path}: is ${st.size} bytes; too large for a JWKS`);
        text = await fh.readFile({ encoding: "utf8" });
      } finally {
        await fh.close();
      }
    } catch (err) {
      if (err instanceof JwksError) throw err;
      const code = isRecord(err) && typeof err["code"] === "string" ? err["code"] : "unknown error";
      throw new JwksError(`JWKS file ${path}: cannot be read (${code})`);
    }
    let keys: Map<string, KeyObject>;
    try {
      keys = parseJwks(text);
    } catch (err) {
      throw new JwksError(`JWKS file ${path}: ${err instanceof Error ? err.message : "invalid"}`);
    }
    if (keys.size === 0) throw new JwksError(`JWKS file ${path}: contains no keys`);
    return new FileJwksSource(keys);
  }

  /** @inheritdoc */
  async getKey(kid: string): Promise<KeyObject | undefined> {
    return this.keys.get(kid);
  }
}

/** Options for {@link CapabilityVerifier}. */
export interface CapabilityVerifierOptions {
  /** Expected `iss`. Default {@link DEFAULT_ISSUER}. */
  issuer?: string;
  /** Expected `aud` (this ledger). Default {@link DEFAULT_AUDIENCE}. */
  audience?: string;
  /** Largest accepted token, in bytes. Default 4096. */
  maxTokenBytes?: number;
  /** Largest accepted `exp - iat`, in seconds. Default 900. */
  maxLifetimeSeconds?: number;
  /** Clock skew tolerated on `exp` and `iat`, in seconds. Default 5. */
  clockToleranceSeconds?: number;
  /** Clock, in milliseconds since the epoch (like `Date.now`). Default `Date.now`. */
  now?: () => number;
}

// Compact JWS: three base64url parts. The signature part is checked separately so that
// `alg: none` tokens (empty signature) are refused for their algorithm, the clearer reason.
const COMPACT_JWS = /^([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]*)$/;

// Header members the profile allows. Anything else (jku, jwk, x5u, crit, b64...) would
// ask the verifier to do something this profile never does, so it is refused outright.
const ALLOWED_HEADER_MEMBERS = new Set(["alg", "typ", "kid"]);

// Longest string copied into `unverified`: enough for any real id or key, short enough
// that a hostile token cannot bloat the refusal record.
const MAX_UNVERIFIED_FIELD = 256;

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
    if (authorization === undefined || authorization.trim() === "") {
      throw refuse("CAPABILITY_MISSING", "no capability: expected authorization: Bearer <capability>");
    }
    // Checked before any parsing, so an oversized header costs nothing but its length.
    if (authorization.length > this.maxTokenBytes + 64) {
      throw refuse("CAPABILITY_TOO_LARGE", `capability is larger than ${this.maxTokenBytes} bytes`);
    }
    const token = parseBearer(authorization);
    if (token === undefined) throw refuse("CAPABILITY_MALFORMED", "authorization is not a Bearer credential");
    // The token is ASCII by now, so its length is its size in bytes.
    if (token.length > this.maxTokenBytes) {
      throw refuse("CAPABILITY_TOO_LARGE", `capability is larger than ${this.maxTokenBytes} bytes`);
    }
    const parts = COMPACT_JWS.exec(token);
    if (!parts) throw refuse("CAPABILITY_MALFORMED", "capability is not a compact JWS (three base64url parts)");
    const [, headerB64 = "", payloadB64 = "", signatureB64 = ""] = parts;

    const header = decodeJsonObject(headerB64);
    const unverified = readUnverified(header, decodeJsonObject(payloadB64));
    if (!header) throw refuse("CAPABILITY_MALFORMED", "capability header is not a JSON object", unverified);

    // The algorithm is decided here, not by the token: anything but the exact string
    // "EdDSA" (none, HS256 keyed with our public key, "eddsa"...) is refused.
    if (header["alg"] !== CAPABILITY_ALG) {
      throw refuse("ALGORITHM_NOT_ALLOWED", `capability algorithm must be ${CAPABILITY_ALG}`, unverified);
    }
    if (header["typ"] !== CAPABILITY_TYP) {
      throw refuse("WRONG_TOKEN_TYPE", `capability typ must be ${CAPABILITY_TYP}`, unverified);
    }
    const kid = header["kid"];
    if (typeof kid !== "string" || kid.length === 0) {
      throw refuse("CAPABILITY_MALFORMED", "capability header has no key id (kid)", unverified);
    }
    for (const member of Object.keys(header)) {
      if (!ALLOWED_HEADER_MEMBERS.has(member)) {
        throw refuse("CAPABILITY_MALFORMED", `capability header member "${member.slice(0, 32)}" is not allowed`, unverified);
      }
    }
    if (signatureB64.length === 0) throw refuse("CAPABILITY_MALFORMED", "capability has no signature", unverified);

    let key: KeyObject | undefined;
    try {
      key = await this.source.getKey(kid);
    } catch (err) {
      // Fail closed, but honestly: the ledger could not check, which is not the tool's fault.
      const detail = err instanceof KeycapError ? err.message : "the signing key source failed";
      throw new CapabilityRefusal(status.UNAVAILABLE, "SIGNING_KEYS_UNAVAILABLE", detail, {}, unverified, false);
    }
    if (!key) throw refuse("UNKNOWN_KEY_ID", "capability is signed with a key id this ledger does not know", unverified);

    let payload: Record<string, unknown>;
    try {
      const result = await jwtVerify(token, key, {
        algorithms: [CAPABILITY_ALG],
        issuer: this.issuer,
        audience: this.audience,
        typ: CAPABILITY_TYP,
        clockTolerance: this.clockToleranceSeconds,
        // Also bounds age (now - iat) and refuses an iat in the future beyond the skew.
        maxTokenAge: this.maxLifetimeSeconds,
        currentDate: new Date(this.now()),
        requiredClaims: [...REQUIRED_CLAIMS],
      });
      payload = result.payload as Record<string, unknown>;
    } catch (err) {
      throw mapJoseError(err, unverified);
    }

    // From here on the signature holds: the claims are the kernel's own words.
    if (typeof payload["aud"] !== "string") {
      // jose accepts an array containing our audience; the profile says one string, so a
      // token meant for several parties is not accepted as ours.
      throw refuse("WRONG_AUDIENCE", "capability audience must be a single string", unverified, {}, true);
    }
    const problem = findClaimProblem(payload);
    if (problem) {
      throw refuse(problem.kind === "missing" ? "CLAIM_MISSING" : "CLAIM_INVALID", problem.detail, unverified, { claim: problem.claim }, true);
    }
    const claims = payload as unknown as CapabilityClaims;
    if (claims.exp - claims.iat > this.maxLifetimeSeconds) {
      throw refuse("LIFETIME_TOO_LONG", `capability lifetime exceeds ${this.maxLifetimeSeconds} s`, unverified, {}, true);
    }

    const verified: VerifiedCapability = {
      iss: claims.iss,
      aud: claims.aud,
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
    return verified;
  }
}

function refuse(
  reason: Exclude<CapabilityRefusalReason, "SIGNING_KEYS_UNAVAILABLE">,
  message: string,
  unverified: UnverifiedCapabilityInfo = {},
  metadata: Record<string, string> = {},
  signatureVerified = false,
): CapabilityRefusal {
  return new CapabilityRefusal(status.UNAUTHENTICATED, reason, message, metadata, unverified, signatureVerified);
}

/**
 * Maps a jose failure to a refusal by error class and claim, never by message text.
 * jose checks the signature before any claim, so every claim error implies a valid
 * signature.
 */
function mapJoseError(err: unknown, unverified: UnverifiedCapabilityInfo): CapabilityRefusal {
  if (err instanceof joseErrors.JWSSignatureVerificationFailed) {
    return refuse("BAD_SIGNATURE", "capability signature does not verify", unverified);
  }
  if (err instanceof joseErrors.JOSEAlgNotAllowed) {
    return refuse("ALGORITHM_NOT_ALLOWED", `capability algorithm must be ${CAPABILITY_ALG}`, unverified);
  }
  if (err instanceof joseErrors.JWTExpired) {
    return refuse("EXPIRED", "capability has expired", unverified, {}, true);
  }
  if (err instanceof joseErrors.JWTClaimValidationFailed) {
    const claim = err.claim;
    if (err.reason === "missing") {
      return refuse("CLAIM_MISSING", `capability claim "${claim}" is missing`, unverified, { claim }, true);
    }
    switch (claim) {
      case "aud":
        return refuse("WRONG_AUDIENCE", "capability is not addressed to this ledger", unverified, {}, true);
      case "iss":
        return refuse("WRONG_ISSUER", "capability was not issued by the expected kernel", unverified, {}, true);
      case "typ":
        return refuse("WRONG_TOKEN_TYPE", `capability typ must be ${CAPABILITY_TYP}`, unverified, {}, true);
      case "nbf":
      case "iat":
        if (err.reason === "check_failed") {
          return refuse("NOT_YET_VALID", "capability is not valid yet (issued in the future)", unverified, {}, true);
        }
        break;
    }
    return refuse("CLAIM_INVALID", `capability claim "${claim}" is invalid`, unverified, { claim }, true);
  }
  if (err instanceof joseErrors.JWTInvalid) {
    // Raised after the signature: the signed payload is not a JSON object.
    return refuse("CAPABILITY_MALFORMED", "capability payload is not a JSON object", unverified, {}, true);
  }
  if (err instanceof joseErrors.JWSInvalid || err instanceof joseErrors.JOSENotSupported) {
    return refuse("CAPABILITY_MALFORMED", "capability is not a valid JWS", unverified);
  }
  // Anything else (a key of the wrong type, a bug) still refuses: fail closed. The cause
  // is kept for local logs only if it is not a jose error, which may carry the payload.
  const refusal = refuse("BAD_SIGNATURE", "capability could not be verified", unverified);
  if (!(err instanceof joseErrors.JOSEError)) (refusal as { cause?: unknown }).cause = err;
  return refusal;
}

/** base64url → JSON object, or undefined. No trust implied: used before verification. */
function decodeJsonObject(b64: string): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(Buffer.from(b64, "base64url").toString("utf8"));
    return isRecord(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

function readUnverified(
  header: Record<string, unknown> | undefined,
  payload: Record<string, unknown> | undefined,
): UnverifiedCapabilityInfo {
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

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
