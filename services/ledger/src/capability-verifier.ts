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
import { isUtf8 } from "node:buffer";
import { createPublicKey, verify as cryptoVerify, type KeyObject } from "node:crypto";
import { open } from "node:fs/promises";
import {
  CAPABILITY_ALG,
  CAPABILITY_TYP,
  CLOCK_TOLERANCE_SECONDS,
  DEFAULT_AUDIENCE,
  DEFAULT_ISSUER,
  MAX_LIFETIME_SECONDS,
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
  /** Least time between two fetches, in milliseconds. Default 1000. */
  refetchCooldownMs?: number;
  /** Clock, in milliseconds since the epoch (like `Date.now`). Default `Date.now`. */
  now?: () => number;
  /** Waits `ms` milliseconds (tests pass one that moves their clock). Default a timer. */
  sleep?: (ms: number) => Promise<void>;
  /** Told why a fetch failed (the ledger logs it). */
  onFetchError?: (cause: string) => void;
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
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly onFetchError: ((cause: string) => void) | undefined;

  /**
   * @param fetchJwksJson returns the JWKS as JSON text (e.g. from GetSigningKeys).
   */
  constructor(
    private readonly fetchJwksJson: () => Promise<string>,
    opts: RemoteJwksSourceOptions = {},
  ) {
    this.cooldownMs = opts.refetchCooldownMs ?? 1000;
    this.onFetchError = opts.onFetchError;
    this.now = opts.now ?? Date.now;
    this.sleep = opts.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
    if (!Number.isFinite(this.cooldownMs) || this.cooldownMs < 0) throw new RangeError("refetchCooldownMs must be >= 0");
  }

  /** @inheritdoc */
  async getKey(kid: string): Promise<KeyObject | undefined> {
    const cached = this.keys.get(kid);
    if (cached) return cached;
    if (!this.inFlight) {
      // An unknown kid may be the key the kernel has just rotated to: rather than refuse it
      // during the cooldown, wait for the next allowed fetch. Every lookup in the meantime
      // shares that wait and that one fetch, so made-up kids still cost at most one kernel
      // call per cooldown (and a wait of at most one cooldown each).
      const wait = this.lastFetchAt === undefined ? 0 : Math.max(0, this.cooldownMs - (this.now() - this.lastFetchAt));
      this.inFlight = (wait > 0 ? this.sleep(wait) : Promise.resolve())
        .then(() => this.refetch())
        .finally(() => {
          this.inFlight = undefined;
        });
    }
    await this.inFlight;
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
      // The cause, not a bare "fetch failed": it is what the refused caller and the log need.
      this.lastFetchError = err instanceof Error ? (err.message.split("\n")[0] ?? "fetch failed") : String(err);
      this.onFetchError?.(this.lastFetchError);
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
  /** Largest accepted `exp - iat`, and oldest accepted `iat` (token age), in seconds. Default 900. */
  maxLifetimeSeconds?: number;
  /** Clock skew tolerated on `exp`, `nbf` and `iat`, in seconds. Default 5. */
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

const BASE64URL_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

// Required claims are checked for presence before any value, in this order (the order this
// verifier has always used, so a token missing several is refused naming the same one).
// findClaimProblem then checks the contract's full list, so a claim added there is not
// missed if it is forgotten here.
const PRESENCE_ORDER = ["iss", "aud", "iat", "exp", "jti", "attempt", "call_id", "effect", "tool_id", "sub"] as const;

/** Every reason but SIGNING_KEYS_UNAVAILABLE (which is UNAVAILABLE, not UNAUTHENTICATED). */
type UnauthenticatedReason = Exclude<CapabilityRefusalReason, "SIGNING_KEYS_UNAVAILABLE">;

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
    // One token, one spelling: Node's decoder would quietly drop stray trailing bits, so a
    // token could be re-spelled without touching its signature.
    if (!isCanonicalBase64url(headerB64) || !isCanonicalBase64url(payloadB64) || !isCanonicalBase64url(signatureB64)) {
      throw refuse("CAPABILITY_MALFORMED", "capability is not canonical base64url");
    }

    // Header and payload are decoded and parsed once, here; the same objects are checked
    // after the signature. Nothing read from them is trusted before that. The text is
    // decoded leniently so that the refusal record (best effort) names what it can;
    // strict UTF-8 is required of both below, before anything is accepted.
    const headerBytes = Buffer.from(headerB64, "base64url");
    const header = parseJsonObject(headerBytes.toString("utf8"));
    const payloadBytes = Buffer.from(payloadB64, "base64url");
    const payload = parseJsonObject(payloadBytes.toString("utf8"));
    const unverified = readUnverified(header, payload);
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

    // We verify with node's crypto directly rather than through a JOSE library: there is
    // one pinned algorithm, the key is parsed once by the source, and the payload is
    // parsed once above, so all a library would add is a second decode and an async
    // WebCrypto round trip. With `null` as the digest, node picks the scheme from the key,
    // so pinning the algorithm means pinning the key type too.
    if (key.type !== "public" || key.asymmetricKeyType !== "ed25519") {
      throw refuse("BAD_SIGNATURE", "capability could not be verified", unverified);
    }
    // Checked here rather than at decoding so that a header with stray bytes keeps the
    // reason it has always had (its typ, its unknown kid...).
    if (!isUtf8(headerBytes)) throw refuse("CAPABILITY_MALFORMED", "capability header is not valid UTF-8", unverified);
    let signatureHolds: boolean;
    try {
      signatureHolds = cryptoVerify(
        null,
        Buffer.from(headerB64 + "." + payloadB64, "ascii"),
        key,
        Buffer.from(signatureB64, "base64url"),
      );
    } catch (err) {
      // Fail closed. Node's crypto errors never quote the data, so the cause can be logged.
      const refusal = refuse("BAD_SIGNATURE", "capability could not be verified", unverified);
      (refusal as { cause?: unknown }).cause = err;
      throw refusal;
    }
    if (!signatureHolds) throw refuse("BAD_SIGNATURE", "capability signature does not verify", unverified);

    // From here on the signature holds: the claims are the kernel's own words, and every
    // refusal says so (signatureVerified).
    if (!payload || !isUtf8(payloadBytes)) {
      throw refuse("CAPABILITY_MALFORMED", "capability payload is not a JSON object", unverified, {}, true);
    }
    const claims = this.checkClaims(payload, unverified);

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
    return verified;
  }

  /**
   * The claim rules, in a fixed order so that a token breaking several gets the same
   * reason every time: presence, issuer, audience, the clock (nbf, exp, age, iat in the
   * future), then the shared contract (types, pairing) and the lifetime. Called only
   * after the signature holds; every refusal is marked signatureVerified.
   */
  private checkClaims(payload: Record<string, unknown>, unverified: UnverifiedCapabilityInfo): CapabilityClaims {
    const refuseVerified = (reason: UnauthenticatedReason, message: string, metadata: Record<string, string> = {}): CapabilityRefusal =>
      refuse(reason, message, unverified, metadata, true);

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
    if (!Number.isFinite(now)) throw refuse("BAD_SIGNATURE", "capability could not be verified", unverified);
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

function refuse(
  reason: UnauthenticatedReason,
  message: string,
  unverified: UnverifiedCapabilityInfo = {},
  metadata: Record<string, string> = {},
  signatureVerified = false,
): CapabilityRefusal {
  return new CapabilityRefusal(status.UNAUTHENTICATED, reason, message, metadata, unverified, signatureVerified);
}

/** JSON text → object, or undefined. No trust implied: used before verification. */
function parseJsonObject(text: string): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(text);
    return isRecord(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

/**
 * True when `s` (already known to be base64url characters) is the one encoding of its
 * bytes: unpadded, a length that is not 1 mod 4, and zero bits past the last whole byte.
 */
function isCanonicalBase64url(s: string): boolean {
  const rest = s.length % 4;
  if (rest === 0) return true;
  if (rest === 1) return false;
  // 2 chars carry 1 byte (4 spare bits), 3 chars carry 2 bytes (2 spare bits).
  const last = BASE64URL_ALPHABET.indexOf(s.charAt(s.length - 1));
  return (last & (rest === 2 ? 0x0f : 0x03)) === 0;
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
