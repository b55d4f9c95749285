/**
 * Mints capabilities: compact JWS (JWT) signed with the kernel's current Ed25519 key.
 *
 * Ed25519 signatures are deterministic (RFC 8032): the same key over the same bytes gives
 * the same signature. The claims are always serialized in one fixed member order, so
 * minting the same claims again yields the very same token. The kernel relies on this to
 * return the same capability for a repeated BeginCall: it stores the claims (including
 * `jti`) and re-signs them with {@link CapabilityMinter.mintWithClaims}. After a key
 * rotation the re-signed token differs (new kid and signature) but grants the same thing.
 *
 * Signing is one synchronous node:crypto Ed25519 signature over the once-encoded header
 * and the payload: jose's SignJWT goes through WebCrypto, whose job machinery cost about
 * 0.3 ms of kernel CPU per capability under load (bench/README.md, the kernel profile),
 * five times the signature itself. The bytes are exactly the ones jose produces (same
 * header and payload JSON, same base64url): a test mints with both and compares, and
 * jose verifies every token minted here (ADR 0003).
 */
import { randomUUID } from "node:crypto";
import {
  CAPABILITY_ALG,
  CAPABILITY_SANDBOX_TYP,
  CAPABILITY_TYP,
  DEFAULT_AUDIENCE,
  DEFAULT_ISSUER,
  DEFAULT_LIFETIME_SECONDS,
  MAX_LIFETIME_SECONDS,
  findClaimProblem,
  type CapabilityClaims,
  type DerivationClaim,
  type EffectName,
  type SandboxMode,
} from "../../capability/src";
import { signEd25519 } from "./ed25519-sign";
import type { SigningKeys } from "./signing-keys";

/** Options for {@link CapabilityMinter}. */
export interface CapabilityMinterOptions {
  /** `iss` claim. Default {@link DEFAULT_ISSUER}. */
  issuer?: string;
  /** `aud` claim: the ledger. Default {@link DEFAULT_AUDIENCE}. */
  audience?: string;
  /** Seconds from `iat` to `exp`. Default 300; at most {@link MAX_LIFETIME_SECONDS}. */
  lifetimeSeconds?: number;
  /** Clock, in milliseconds since the epoch (like `Date.now`). Default `Date.now`. */
  now?: () => number;
}

/** What to grant. Camel case here; the wire claims are snake case. */
export interface MintInput {
  /** The principal that began the call (`sub`). */
  principal: string;
  toolId: string;
  effect: EffectName;
  callId: string;
  /** Attempt number, starting at 1. */
  attempt: number;
  /** Derived idempotency key; required iff `effect` is "idempotent". */
  key?: string;
  /** Request id; required iff `effect` is "queryable". */
  requestId?: string;
  /** How `key` was derived (idempotent only; ADR 0026). */
  derivation?: DerivationClaim;
  /** The run mode when not live (ADR 0028): signed under the sandbox typ with a `mode` claim. */
  mode?: SandboxMode;
  /** Capability id. Default a fresh `crypto.randomUUID()`. */
  jti?: string;
  /** Issued-at, seconds since the epoch. Default now. */
  iat?: number;
}

/** A minted capability. `token` is a bearer credential: never log it. */
export interface MintedCapability {
  token: string;
  claims: CapabilityClaims;
  expiresAt: Date;
}

/**
 * Signs capabilities with the kernel's current key.
 *
 * @example
 * const minter = new CapabilityMinter(keys, { lifetimeSeconds: 300 });
 * const { token } = await minter.mint({ toolId: "pay", effect: "idempotent", callId, attempt: 1, key });
 */
export class CapabilityMinter {
  private readonly issuer: string;
  private readonly audience: string;
  private readonly lifetimeSeconds: number;
  private readonly now: () => number;
  /** base64url of the protected headers (live, sandbox): the same for every token of this key. */
  private readonly encodedHeader: string;
  private readonly encodedSandboxHeader: string;

  constructor(
    private readonly keys: SigningKeys,
    opts: CapabilityMinterOptions = {},
  ) {
    this.issuer = opts.issuer ?? DEFAULT_ISSUER;
    this.audience = opts.audience ?? DEFAULT_AUDIENCE;
    this.lifetimeSeconds = opts.lifetimeSeconds ?? DEFAULT_LIFETIME_SECONDS;
    this.now = opts.now ?? Date.now;
    const l = this.lifetimeSeconds;
    // The ledger refuses longer lifetimes; minting them would only produce dead tokens.
    if (!Number.isSafeInteger(l) || l < 1 || l > MAX_LIFETIME_SECONDS) {
      throw new RangeError(`lifetimeSeconds must be a whole number from 1 to ${MAX_LIFETIME_SECONDS}`);
    }
    if (this.issuer.length === 0 || this.audience.length === 0) {
      throw new RangeError("issuer and audience must be non-empty");
    }
    this.encodedHeader = base64url(JSON.stringify({ alg: CAPABILITY_ALG, typ: CAPABILITY_TYP, kid: keys.currentKid }));
    this.encodedSandboxHeader = base64url(JSON.stringify({ alg: CAPABILITY_ALG, typ: CAPABILITY_SANDBOX_TYP, kid: keys.currentKid }));
  }

  /** Mints a capability for one call attempt. */
  async mint(input: MintInput): Promise<MintedCapability> {
    const iat = input.iat ?? Math.floor(this.now() / 1000);
    const claims: CapabilityClaims = {
      iss: this.issuer,
      aud: this.audience,
      sub: input.principal,
      tool_id: input.toolId,
      effect: input.effect,
      call_id: input.callId,
      attempt: input.attempt,
      jti: input.jti ?? randomUUID(),
      iat,
      exp: iat + this.lifetimeSeconds,
    };
    if (input.key !== undefined) claims.key = input.key;
    if (input.requestId !== undefined) claims.request_id = input.requestId;
    if (input.derivation !== undefined) claims.derivation = input.derivation;
    if (input.mode !== undefined) claims.mode = input.mode;
    return this.mintWithClaims(claims);
  }

  /**
   * The claims of a repeated BeginCall: unchanged (so the same token) while more than half
   * their lifetime is left; else the same claims, same `jti`, with a fresh `iat`/`exp`.
   * The `jti` (Unsafe: the effect id; Queryable: the spent id) keeps it the one
   * capability of that attempt, so renewal never grants a second effect, and a runtime
   * that begins again after a pause gets a capability the ledger still accepts.
   */
  renewed(claims: CapabilityClaims): CapabilityClaims {
    const now = Math.floor(this.now() / 1000);
    if (claims.exp - now > this.lifetimeSeconds / 2) return claims;
    return { ...claims, iat: now, exp: now + this.lifetimeSeconds };
  }

  /**
   * Re-signs stored claims unchanged (same `jti`, `iat`, `exp`), with the current key.
   * With the same key this returns the identical token (see the module comment). The
   * caller decides whether expired claims should be re-signed; this does not check time.
   *
   * @throws TypeError when the claims break the contract (the ledger would refuse them).
   */
  async mintWithClaims(claims: CapabilityClaims): Promise<MintedCapability> {
    const ordered = canonicalOrder(claims);
    const problem = findClaimProblem(ordered as unknown as Record<string, unknown>);
    if (problem) throw new TypeError(`cannot mint: ${problem.detail}`);
    const header = ordered.mode === undefined ? this.encodedHeader : this.encodedSandboxHeader;
    const signingInput = `${header}.${base64url(JSON.stringify(ordered))}`;
    // RFC 8032 PureEdDSA over the signing input, as RFC 8037 specifies for JWS.
    const token = `${signingInput}.${signEd25519(Buffer.from(signingInput), this.keys.privateKey).toString("base64url")}`;
    return { token, claims: ordered, expiresAt: new Date(ordered.exp * 1000) };
  }
}

function base64url(text: string): string {
  return Buffer.from(text, "utf8").toString("base64url");
}

/**
 * One fixed member order, whatever order the caller's object (say, a document read back
 * from MongoDB) has: JSON.stringify follows insertion order, and determinism of the token
 * depends on identical payload bytes.
 */
function canonicalOrder(c: CapabilityClaims): CapabilityClaims {
  const out: CapabilityClaims = {
    iss: c.iss,
    aud: c.aud,
    sub: c.sub,
    tool_id: c.tool_id,
    effect: c.effect,
    call_id: c.call_id,
    attempt: c.attempt,
    jti: c.jti,
    iat: c.iat,
    exp: c.exp,
  };
  if (c.key !== undefined) out.key = c.key;
  if (c.request_id !== undefined) out.request_id = c.request_id;
  if (c.derivation !== undefined) {
    const context = c.derivation.context.run_id !== undefined ? { run_id: c.derivation.context.run_id } : {};
    out.derivation = { version: c.derivation.version, fields: [...c.derivation.fields], context };
  }
  if (c.mode !== undefined) out.mode = c.mode;
  return out;
}
