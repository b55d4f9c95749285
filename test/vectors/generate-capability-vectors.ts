/**
 * Generates test/vectors/capability-verification.json, the capability-verification corpus
 * (docs/decisions/0003-capability-format.md):
 *
 *   npm run build && node dist/test/vectors/generate-capability-vectors.js
 *
 * Reproducible: the keys come from fixed seeds, Ed25519 and HMAC are deterministic, and
 * every time is fixed, so running it again rewrites the same bytes (a unit test checks
 * that the committed file is what this script produces). Every expected verdict is stated
 * here by hand, from the profile, never computed by running a verifier.
 *
 * Deliberately self-contained: the profile's constants are written out rather than
 * imported, so a change to the code that changes the profile makes the corpus fail.
 */
import { createHash, createHmac, createPrivateKey, sign, type KeyObject } from "node:crypto";
import * as fs from "node:fs";
import {
  CAPABILITY_VECTORS_FILE,
  serializeCapabilityVectorFile,
  type CapabilityVector,
  type CapabilityVectorFile,
  type CapabilityVerdict,
  type VectorJwks,
  type VerdictsBy,
} from "../support/capability-vectors";
import type { CapabilityRefusalReason } from "../../services/capability/src";

const TYP = "keycap-capability+jwt";
/** The typ of shadow and replay capabilities (ADR 0028). */
const SANDBOX_TYP = "keycap-sandbox-capability+jwt";
const ISSUER = "keycap-kernel";
const AUDIENCE = "keycap-ledger";
const MAX_TOKEN_BYTES = 4096;
const MAX_LIFETIME = 900;
const SKEW = 5;

/** Verification time of every vector unless stated: 2030-01-01T00:00:00Z. */
const T = 1_893_456_000;

const BASE64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

// RFC 8410 PKCS #8 prefixes: the 32-byte seed follows.
const PKCS8_PREFIX = {
  ed25519: Buffer.from("302e020100300506032b657004220420", "hex"),
  x25519: Buffer.from("302e020100300506032b656e04220420", "hex"),
};

interface FixedKey {
  privateKey: KeyObject;
  /** As the kernel publishes it: public members only. */
  publicJwk: Record<string, string>;
  /** The whole key, `d` included, for the corpus's `keys` section. */
  privateJwk: Record<string, string>;
  kid: string;
}

/** A key from a fixed seed: SHA-256 of a label, so anyone can re-derive it. */
function fixedKey(label: string, curve: "ed25519" | "x25519" = "ed25519"): FixedKey {
  const seed = createHash("sha256").update(`keycap capability vectors v1: ${label}`).digest();
  const privateKey = createPrivateKey({ key: Buffer.concat([PKCS8_PREFIX[curve], seed]), format: "der", type: "pkcs8" });
  const jwk = privateKey.export({ format: "jwk" });
  const x = String(jwk.x);
  const crv = String(jwk.crv);
  // RFC 7638 thumbprint: SHA-256 of the required members in lexicographic order.
  const kid = createHash("sha256").update(`{"crv":"${crv}","kty":"OKP","x":"${x}"}`).digest("base64url");
  const use: Record<string, string> = curve === "ed25519" ? { alg: "EdDSA", use: "sig" } : { use: "enc" };
  const publicJwk: Record<string, string> = { kty: "OKP", crv, x, kid, ...use };
  return { privateKey, publicJwk, privateJwk: { ...publicJwk, d: String(jwk.d) }, kid };
}

const current = fixedKey("kernel current signing key");
const retired = fixedKey("kernel retired signing key");
const attacker = fixedKey("attacker key");
const encryption = fixedKey("kernel encryption key", "x25519");

const JWKS: VectorJwks = { keys: [current.publicJwk] };
const JWKS_WITH_RETIRED: VectorJwks = { keys: [current.publicJwk, retired.publicJwk] };

function b64(bytes: Buffer | string): string {
  return Buffer.from(bytes).toString("base64url");
}
function b64json(v: unknown): string {
  return b64(JSON.stringify(v));
}
/** Signs `header.payload` (already encoded, kept exactly as spelled) with Ed25519. */
function signInput(input: string, key: KeyObject): string {
  return `${input}.${sign(null, Buffer.from(input, "ascii"), key).toString("base64url")}`;
}
function jws(header: unknown, payload: unknown, key: KeyObject = current.privateKey): string {
  return signInput(`${b64json(header)}.${b64json(payload)}`, key);
}
/** The same base64url text with a stray bit set past the last whole byte (same bytes). */
function withStrayBit(s: string): string {
  if (s.length % 4 === 0) throw new Error("no spare bits to set");
  const last = BASE64URL.indexOf(s.charAt(s.length - 1));
  return s.slice(0, -1) + BASE64URL.charAt(last | 1);
}
/** The parts of a token. */
function parts(token: string): [string, string, string] {
  const [h = "", p = "", s = ""] = token.split(".");
  return [h, p, s];
}

function header(overrides: Record<string, unknown> = {}, key: FixedKey = current): Record<string, unknown> {
  return { alg: "EdDSA", typ: TYP, kid: key.kid, ...overrides };
}

type Claims = Record<string, unknown>;

/** Valid idempotent claims at T (issued 10 s before), in the minter's member order. */
function idempotent(overrides: Claims = {}): Claims {
  return {
    iss: ISSUER,
    aud: AUDIENCE,
    sub: "vector-runtime",
    tool_id: "payments.charge",
    effect: "idempotent",
    call_id: "3f1c2a9e-7d44-4c1b-9a0e-5b8f6d2c1e01",
    attempt: 1,
    jti: "9b2e4f6a-1c3d-4e5f-8a7b-0c1d2e3f4a01",
    key: "Qm9yZGVyLTEwMjQ6c2hhMjU2LWtleS1kZXJpdmVk",
    iat: T - 10,
    exp: T - 10 + 300,
    ...overrides,
  };
}
function queryable(overrides: Claims = {}): Claims {
  const { key: _key, ...rest } = idempotent({ tool_id: "notify.send", effect: "queryable", jti: "9b2e4f6a-1c3d-4e5f-8a7b-0c1d2e3f4a02" });
  return { ...rest, request_id: "req-7f3e", ...overrides };
}
function unsafe(overrides: Claims = {}): Claims {
  const { key: _key, ...rest } = idempotent({ tool_id: "payments.transfer", effect: "unsafe", jti: "9b2e4f6a-1c3d-4e5f-8a7b-0c1d2e3f4a03" });
  return { ...rest, ...overrides };
}
function without(claims: Claims, ...names: string[]): Claims {
  const out = { ...claims };
  for (const n of names) delete out[n];
  return out;
}

/** The verdict for an accepted token: its claims (the known ones) plus the signing kid. */
function verified(claims: Claims, kid: string = current.kid): CapabilityVerdict {
  const known = ["iss", "aud", "sub", "tool_id", "effect", "call_id", "attempt", "jti", "iat", "exp", "key", "request_id"];
  const out: Record<string, unknown> = {};
  for (const name of known) if (claims[name] !== undefined) out[name] = claims[name];
  return { verified: { ...out, kid } };
}

// Refusals that come after the signature held report signatureVerified (ADR 0003).
const AFTER_SIGNATURE: readonly CapabilityRefusalReason[] = [
  "EXPIRED",
  "NOT_YET_VALID",
  "WRONG_ISSUER",
  "WRONG_AUDIENCE",
  "CLAIM_MISSING",
  "CLAIM_INVALID",
  "LIFETIME_TOO_LONG",
];
function refused(reason: CapabilityRefusalReason, signatureVerified = AFTER_SIGNATURE.includes(reason)): CapabilityVerdict {
  return { refused: reason, signature_verified: signatureVerified };
}

interface Case {
  name: string;
  note: string;
  token: string;
  expect: CapabilityVerdict;
  expectBy?: VerdictsBy;
  authorization?: string | null;
  jwks?: VectorJwks | null;
  clock?: number;
}

/**
 * A token padded with an extra claim to exactly `bytes` bytes. Base64url cannot spell
 * every length, so the header's JSON whitespace (not part of the profile) is varied too.
 */
function paddedTo(bytes: number): { token: string; claims: Claims } {
  for (let spaces = 0; spaces < 4; spaces++) {
    const headerB64 = b64(`{"alg":${" ".repeat(spaces)}"EdDSA","typ":"${TYP}","kid":"${current.kid}"}`);
    for (let pad = 0; pad < bytes; pad++) {
      const claims = idempotent({ jti: "9b2e4f6a-1c3d-4e5f-8a7b-0c1d2e3f4a10", pad: "p".repeat(pad) });
      const token = signInput(`${headerB64}.${b64json(claims)}`, current.privateKey);
      if (token.length === bytes) return { token, claims };
      if (token.length > bytes) break;
    }
  }
  throw new Error(`no padding gives a ${bytes}-byte token`);
}

/** Idempotent claims whose payload encoding satisfies `test` (by varying the jti). */
function payloadWhere(test: (payloadB64: string) => boolean, jtiStem = "9b2e4f6a-1c3d-4e5f-8a7b-0c1d2e3f4a11"): Claims {
  for (let i = 0; i < 1000; i++) {
    // i's digit count varies the length, its digits the spelling.
    const claims = idempotent({ jti: `${jtiStem}-${i}` });
    if (test(b64json(claims))) return claims;
  }
  throw new Error("no jti gives such a payload");
}

function cases(): Case[] {
  const good = jws(header(), idempotent());
  const [goodH, goodP, goodS] = parts(good);
  const publicKeyBytes = Buffer.from(current.publicJwk["x"] ?? "", "base64url");
  const hs256Input = `${b64json(header({ alg: "HS256" }))}.${b64json(idempotent())}`;
  const exactly = paddedTo(MAX_TOKEN_BYTES);
  const oneOver = paddedTo(MAX_TOKEN_BYTES + 1);
  const farOver = paddedTo(6000);
  const strayPayload = payloadWhere((p) => p.length % 4 !== 0);
  // ASCII encodes to '-' or '_' only where a '>', '?' or '~' ends a 3-byte group.
  const stdAlphabet = payloadWhere((p) => /[-_]/.test(p), "9b2e4f6a-1c3d-4e5f-8a7b-0c1d2e3f4a12~~~");
  // A header or payload whose last string value ends in a byte that is not UTF-8.
  const notUtf8Json = (v: Record<string, unknown>, lastMember: string, bytes: number[]): string => {
    const text = JSON.stringify({ ...v, [lastMember]: "" });
    return Buffer.concat([Buffer.from(text.slice(0, -2)), Buffer.from(bytes), Buffer.from('"}')]).toString("base64url");
  };

  return [
    // ---- accepted ----
    {
      name: "accepts-idempotent",
      note: "The reference capability: every claim of an idempotent grant, signed by the current key.",
      token: good,
      expect: verified(idempotent()),
    },
    { name: "accepts-queryable", note: "A queryable grant carries request_id and no key.", token: jws(header(), queryable()), expect: verified(queryable()) },
    { name: "accepts-unsafe", note: "An unsafe grant carries neither key nor request_id.", token: jws(header(), unsafe()), expect: verified(unsafe()) },
    {
      name: "accepts-retired-key-within-grace",
      note: "Signed by the previous key, which the kernel still publishes after a rotation (grace period); kid names that key.",
      token: jws(header({}, retired), idempotent(), retired.privateKey),
      jwks: JWKS_WITH_RETIRED,
      expect: verified(idempotent(), retired.kid),
    },
    {
      name: "accepts-bearer-scheme-in-lower-case",
      note: "RFC 6750: the auth scheme is case-insensitive.",
      token: good,
      authorization: `bearer ${good}`,
      expect: verified(idempotent()),
    },
    {
      name: "accepts-header-members-reordered-with-whitespace",
      note: "The signature covers the header as spelled; member order and JSON whitespace are not part of the profile.",
      token: signInput(`${b64(`{ "kid": "${current.kid}", "typ": "${TYP}", "alg": "EdDSA" }`)}.${goodP}`, current.privateKey),
      expect: verified(idempotent()),
    },
    {
      name: "accepts-duplicate-header-member-last-wins",
      note: "A header naming alg twice (none, then EdDSA) is read with the last value, as JSON.parse and jose both do (RFC 7515 §4 allows lexically-last); pinned so that a parser change is noticed.",
      token: signInput(`${b64(`{"alg":"none","typ":"${TYP}","kid":"${current.kid}","alg":"EdDSA"}`)}.${goodP}`, current.privateKey),
      expect: verified(idempotent()),
    },
    {
      name: "accepts-exp-within-skew",
      note: "exp 4 s in the past: within the 5 s tolerance (refused at 5 s, see refuses-expired-at-skew).",
      token: jws(header(), idempotent({ iat: T - 304, exp: T - 4 })),
      expect: verified(idempotent({ iat: T - 304, exp: T - 4 })),
    },
    {
      name: "accepts-iat-in-future-within-skew",
      note: "iat 5 s ahead of the ledger's clock: within the tolerance.",
      token: jws(header(), idempotent({ iat: T + 5, exp: T + 305 })),
      expect: verified(idempotent({ iat: T + 5, exp: T + 305 })),
    },
    {
      name: "accepts-nbf-within-skew",
      note: "nbf is optional and honoured; 5 s ahead is within the tolerance. nbf is not part of the verified result.",
      token: jws(header(), idempotent({ nbf: T + 5 })),
      expect: verified(idempotent()),
    },
    {
      name: "accepts-lifetime-of-exactly-900-s",
      note: "exp - iat = 900 s, the longest lifetime the ledger accepts.",
      token: jws(header(), idempotent({ iat: T - 10, exp: T + 890 })),
      expect: verified(idempotent({ iat: T - 10, exp: T + 890 })),
    },
    {
      name: "accepts-and-drops-unknown-claim",
      note: "A claim outside the contract (scope) is ignored: the verified result holds only the contract's claims.",
      token: jws(header(), idempotent({ scope: "admin" })),
      expect: verified(idempotent()),
    },
    {
      name: "accepts-token-of-exactly-4096-bytes",
      note: "The size limit is inclusive: a 4096-byte token (padded with an extra claim) is accepted.",
      token: exactly.token,
      expect: verified(exactly.claims),
    },

    // ---- CAPABILITY_MISSING ----
    {
      name: "refuses-no-authorization",
      note: "The call carries no authorization metadata at all.",
      token: "",
      authorization: null,
      expect: refused("CAPABILITY_MISSING"),
    },
    {
      name: "refuses-blank-authorization",
      note: "An authorization value of only spaces is no capability.",
      token: "",
      authorization: "   ",
      expect: refused("CAPABILITY_MISSING"),
    },

    // ---- CAPABILITY_TOO_LARGE ----
    {
      name: "refuses-token-of-4097-bytes",
      note: "One byte over the 4096-byte limit, validly signed: refused for its size before anything is parsed.",
      token: oneOver.token,
      expect: refused("CAPABILITY_TOO_LARGE"),
    },
    {
      name: "refuses-oversized-authorization",
      note: "A 6000-byte signed token: the authorization value alone is over the limit, refused on its length.",
      token: farOver.token,
      expect: refused("CAPABILITY_TOO_LARGE"),
    },

    // ---- CAPABILITY_MALFORMED ----
    {
      name: "refuses-basic-credentials",
      note: "Not a Bearer credential.",
      token: "dXNlcjpwYXNz",
      authorization: "Basic dXNlcjpwYXNz",
      expect: refused("CAPABILITY_MALFORMED"),
    },
    { name: "refuses-garbage", note: "One part, not a compact JWS.", token: "not-a-jws", expect: refused("CAPABILITY_MALFORMED") },
    { name: "refuses-four-parts", note: "A fourth part (JWE has five, JWS compact has three).", token: `${good}.e30`, expect: refused("CAPABILITY_MALFORMED") },
    {
      name: "refuses-header-not-a-json-object",
      note: "The header decodes to a JSON string, not an object.",
      token: signInput(`${b64json("EdDSA")}.${goodP}`, current.privateKey),
      expect: refused("CAPABILITY_MALFORMED"),
    },
    {
      name: "refuses-header-without-kid",
      note: "No kid: the profile never guesses the key, even when the key set holds one key.",
      token: jws({ alg: "EdDSA", typ: TYP }, idempotent()),
      expect: refused("CAPABILITY_MALFORMED"),
    },
    {
      name: "refuses-empty-kid",
      note: "kid must be a non-empty string.",
      token: jws(header({ kid: "" }), idempotent()),
      expect: refused("CAPABILITY_MALFORMED"),
    },
    {
      name: "refuses-jku-header",
      note: "jku points at a key set elsewhere; the profile never fetches keys, so any jku is refused, even on a token the kernel's key signed.",
      token: jws(header({ jku: "https://attacker.example/jwks.json" }), idempotent()),
      expect: refused("CAPABILITY_MALFORMED"),
    },
    {
      name: "refuses-embedded-jwk-header",
      note: "The attacker embeds their own public key (jwk) and signs with it under its thumbprint: refused for the header member, before any key lookup.",
      token: jws(header({ jwk: { kty: "OKP", crv: "Ed25519", x: attacker.publicJwk["x"] } }, attacker), idempotent(), attacker.privateKey),
      expect: refused("CAPABILITY_MALFORMED"),
    },
    {
      name: "refuses-crit-header",
      note: "A critical extension the profile does not define; signed by the kernel's key.",
      token: jws(header({ crit: ["keycap-ext"], "keycap-ext": true }), idempotent()),
      expect: refused("CAPABILITY_MALFORMED"),
    },
    {
      name: "refuses-unencoded-payload-header",
      note: "RFC 7797 b64: false under crit: the profile has no unencoded payloads.",
      token: jws(header({ b64: false, crit: ["b64"] }), idempotent()),
      expect: refused("CAPABILITY_MALFORMED"),
    },
    {
      name: "refuses-eddsa-without-signature",
      note: "alg EdDSA with an empty signature part.",
      token: `${goodH}.${goodP}.`,
      expect: refused("CAPABILITY_MALFORMED"),
    },
    {
      name: "refuses-signature-with-stray-bits",
      note: "The signature re-spelled with a non-zero bit past its last byte: the same bytes, a second spelling of one token. Only the one canonical base64url spelling is accepted.",
      token: `${goodH}.${goodP}.${withStrayBit(goodS)}`,
      expect: refused("CAPABILITY_MALFORMED"),
    },
    {
      name: "refuses-padded-signature",
      note: "base64url with '=' padding is not the unpadded encoding JWS uses.",
      token: `${good}==`,
      expect: refused("CAPABILITY_MALFORMED"),
    },
    {
      name: "refuses-signature-length-1-mod-4",
      note: "A base64url part whose length is 1 mod 4 encodes no whole number of bytes.",
      token: `${good}AAA`,
      expect: refused("CAPABILITY_MALFORMED"),
    },
    {
      name: "refuses-payload-with-stray-bits-signed-as-spelled",
      note: "The payload spelled with a stray bit and signed as spelled by the kernel's key: the signature holds, the spelling is refused.",
      token: signInput(`${goodH}.${withStrayBit(b64json(strayPayload))}`, current.privateKey),
      expect: refused("CAPABILITY_MALFORMED"),
    },
    {
      name: "refuses-standard-base64-alphabet",
      note: "The payload in the standard base64 alphabet ('+' and '/' for '-' and '_'), signed as spelled: not base64url.",
      token: signInput(`${goodH}.${b64json(stdAlphabet).replace(/-/g, "+").replace(/_/g, "/")}`, current.privateKey),
      expect: refused("CAPABILITY_MALFORMED"),
    },
    {
      name: "refuses-header-not-utf8-under-known-kid",
      note: "The header's kid ends in a byte that is not UTF-8 (0xC3); decoded leniently it names a kid the key set holds, so the refusal is for the encoding, not the key.",
      token: signInput(`${notUtf8Json({ alg: "EdDSA", typ: TYP }, "kid", [...Buffer.from(current.kid), 0xc3])}.${goodP}`, current.privateKey),
      jwks: { keys: [{ ...current.publicJwk, kid: `${current.kid}\ufffd` }] },
      expect: refused("CAPABILITY_MALFORMED"),
    },
    {
      name: "refuses-payload-not-utf8-signed-by-kernel",
      note: "A payload with a byte that is not UTF-8 (0xFF) in a string, signed by the kernel's key: refused after the signature, as verified.",
      token: signInput(`${goodH}.${notUtf8Json(idempotent(), "note", [0xff])}`, current.privateKey),
      expect: refused("CAPABILITY_MALFORMED", true),
    },
    {
      name: "refuses-payload-json-array-signed-by-kernel",
      note: "The signed payload is a JSON array, not a claims object: refused after the signature, as verified.",
      token: jws(header(), [1, 2]),
      expect: refused("CAPABILITY_MALFORMED", true),
    },

    // ---- ALGORITHM_NOT_ALLOWED ----
    {
      name: "refuses-alg-none",
      note: "Unsecured JWT: alg none, empty signature.",
      token: `${b64json(header({ alg: "none" }))}.${goodP}.`,
      expect: refused("ALGORITHM_NOT_ALLOWED"),
    },
    {
      name: "refuses-alg-none-with-junk-signature",
      note: "alg none with a signature part present: still the algorithm that is refused.",
      token: `${b64json(header({ alg: "none" }))}.${goodP}.c2ln`,
      expect: refused("ALGORITHM_NOT_ALLOWED"),
    },
    {
      name: "refuses-hs256-keyed-with-public-key-bytes",
      note: "Algorithm confusion: HS256 with the kernel's public key bytes (x) as the HMAC secret.",
      token: `${hs256Input}.${createHmac("sha256", publicKeyBytes).update(hs256Input).digest("base64url")}`,
      expect: refused("ALGORITHM_NOT_ALLOWED"),
    },
    {
      name: "refuses-hs256-keyed-with-public-jwk-text",
      note: "Algorithm confusion: HS256 with the kernel's published JWK (JSON text) as the HMAC secret.",
      token: `${hs256Input}.${createHmac("sha256", JSON.stringify(current.publicJwk)).update(hs256Input).digest("base64url")}`,
      expect: refused("ALGORITHM_NOT_ALLOWED"),
    },
    {
      name: "refuses-alg-lower-case",
      note: "alg is compared exactly: 'eddsa' is not 'EdDSA', even with a valid Ed25519 signature.",
      token: jws(header({ alg: "eddsa" }), idempotent()),
      expect: refused("ALGORITHM_NOT_ALLOWED"),
    },
    {
      name: "refuses-alg-ed25519-fully-specified",
      note: "RFC 9864's fully-specified 'Ed25519' names the same signature, but the profile pins 'EdDSA'.",
      token: jws(header({ alg: "Ed25519" }), idempotent()),
      expect: refused("ALGORITHM_NOT_ALLOWED"),
    },
    { name: "refuses-alg-missing", note: "No alg at all.", token: jws({ typ: TYP, kid: current.kid }, idempotent()), expect: refused("ALGORITHM_NOT_ALLOWED") },

    // ---- WRONG_TOKEN_TYPE ----
    {
      name: "refuses-typ-jwt",
      note: "A plain JWT (an ID or access token signed by the same key) is not a capability.",
      token: jws(header({ typ: "JWT" }), idempotent()),
      expect: refused("WRONG_TOKEN_TYPE"),
    },
    {
      name: "refuses-typ-missing",
      note: "No typ: explicit typing is required (RFC 8725 §3.11).",
      token: jws({ alg: "EdDSA", kid: current.kid }, idempotent()),
      expect: refused("WRONG_TOKEN_TYPE"),
    },
    {
      name: "refuses-typ-with-application-prefix",
      note: "typ is compared exactly: the media-type spelling with 'application/' is refused.",
      token: jws(header({ typ: `application/${TYP}` }), idempotent()),
      expect: refused("WRONG_TOKEN_TYPE"),
    },
    {
      name: "refuses-typ-in-upper-case",
      note: "typ is compared exactly, not case-insensitively.",
      token: jws(header({ typ: TYP.toUpperCase() }), idempotent()),
      expect: refused("WRONG_TOKEN_TYPE"),
    },

    // ---- UNKNOWN_KEY_ID ----
    {
      name: "refuses-unknown-kid",
      note: "Signed by the attacker's key under its own thumbprint, which the kernel never published.",
      token: jws(header({}, attacker), idempotent(), attacker.privateKey),
      expect: refused("UNKNOWN_KEY_ID"),
    },
    {
      name: "refuses-retired-key-past-grace",
      note: "Signed by the previous key after the kernel stopped publishing it (grace period over).",
      token: jws(header({}, retired), idempotent(), retired.privateKey),
      expect: refused("UNKNOWN_KEY_ID"),
    },
    {
      name: "refuses-header-not-utf8-kid-unknown",
      note: "The kid ends in a byte that is not UTF-8; decoded leniently it names no published key, so the refusal is the unknown kid (the reason such a header has always had).",
      token: signInput(`${notUtf8Json({ alg: "EdDSA", typ: TYP }, "kid", [...Buffer.from(current.kid), 0xc3])}.${goodP}`, current.privateKey),
      expect: refused("UNKNOWN_KEY_ID"),
    },

    // ---- SIGNING_KEYS_UNAVAILABLE ----
    {
      name: "refuses-when-kernel-keys-unreachable",
      note: "The ledger cannot fetch the kernel's key set at all (jwks null): UNAVAILABLE, retry later, never an accusation of the tool.",
      token: good,
      jwks: null,
      expect: refused("SIGNING_KEYS_UNAVAILABLE"),
    },
    {
      name: "refuses-when-key-set-holds-private-key",
      note: "The kernel published its private key (d): the whole key set is refused as a misconfiguration, so nothing verifies.",
      token: good,
      jwks: { keys: [current.privateJwk] },
      expect: refused("SIGNING_KEYS_UNAVAILABLE"),
    },
    {
      name: "refuses-when-key-set-holds-non-ed25519-key",
      note: "The key set also holds an X25519 key: refused as a whole rather than by skipping the key, though the signing key itself is there.",
      token: good,
      jwks: { keys: [current.publicJwk, encryption.publicJwk] },
      expect: refused("SIGNING_KEYS_UNAVAILABLE"),
    },

    // ---- BAD_SIGNATURE ----
    {
      name: "refuses-foreign-key-under-kernel-kid",
      note: "Well-formed claims and header naming the kernel's kid, signed by the attacker's key.",
      token: jws(header(), idempotent(), attacker.privateKey),
      expect: refused("BAD_SIGNATURE"),
    },
    {
      name: "refuses-tampered-tool-id",
      note: "A genuine capability whose tool_id was changed after signing, signature kept.",
      token: `${goodH}.${b64json(idempotent({ tool_id: "payments.refund" }))}.${goodS}`,
      expect: refused("BAD_SIGNATURE"),
    },
    {
      name: "refuses-tampered-key",
      note: "A genuine capability whose bound idempotency key was swapped for one of the caller's choosing.",
      token: `${goodH}.${b64json(idempotent({ key: "a-key-of-my-choosing" }))}.${goodS}`,
      expect: refused("BAD_SIGNATURE"),
    },
    {
      name: "refuses-kid-swapped-to-another-published-key",
      note: "Signed by the current key but naming the retired key's kid: the kid selects the key, the signature must hold under it.",
      token: jws(header({}, retired), idempotent()),
      jwks: JWKS_WITH_RETIRED,
      expect: refused("BAD_SIGNATURE"),
    },
    {
      name: "refuses-truncated-signature",
      note: "The signature cut to its first 32 bytes (canonically re-encoded): not an Ed25519 signature.",
      token: `${goodH}.${goodP}.${b64(Buffer.from(goodS, "base64url").subarray(0, 32))}`,
      expect: refused("BAD_SIGNATURE"),
    },
    {
      name: "refuses-non-object-payload-signed-by-foreign-key",
      note: "A payload that is not a claims object, under a foreign signature: the signature is checked first, so the reason is the signature.",
      token: jws(header(), [1, 2], attacker.privateKey),
      expect: refused("BAD_SIGNATURE"),
    },

    // ---- EXPIRED ----
    {
      name: "refuses-expired-at-skew",
      note: "exp exactly 5 s in the past: the tolerance is exclusive at its edge.",
      token: jws(header(), idempotent({ iat: T - 305, exp: T - 5 })),
      expect: refused("EXPIRED"),
    },
    {
      name: "refuses-expired-an-hour-ago",
      note: "The reference capability presented an hour after it was minted.",
      token: good,
      clock: T + 3600,
      expect: refused("EXPIRED"),
    },
    {
      name: "refuses-issued-too-long-ago-whatever-exp",
      note: "iat 906 s ago (more than the 900 s maximum age plus 5 s skew) with exp far ahead: refused for its age, before the lifetime rule.",
      token: jws(header(), idempotent({ iat: T - 906, exp: T + 1000 })),
      expect: refused("EXPIRED"),
    },

    // ---- NOT_YET_VALID ----
    {
      name: "refuses-issued-in-the-future",
      note: "iat 60 s ahead of the ledger's clock.",
      token: jws(header(), idempotent({ iat: T + 60, exp: T + 360 })),
      expect: refused("NOT_YET_VALID"),
    },
    {
      name: "refuses-nbf-in-the-future",
      note: "nbf 6 s ahead: past the 5 s tolerance.",
      token: jws(header(), idempotent({ nbf: T + 6 })),
      expect: refused("NOT_YET_VALID"),
    },

    // ---- WRONG_ISSUER / WRONG_AUDIENCE ----
    {
      name: "refuses-wrong-issuer",
      note: "Signed by the kernel's key but issued as someone else.",
      token: jws(header(), idempotent({ iss: "not-the-kernel" })),
      expect: refused("WRONG_ISSUER"),
    },
    {
      name: "refuses-wrong-audience",
      note: "Addressed to another ledger.",
      token: jws(header(), idempotent({ aud: "some-other-ledger" })),
      expect: refused("WRONG_AUDIENCE"),
    },
    {
      name: "refuses-audience-array-naming-this-ledger",
      note: "aud as an array that includes this ledger: the profile says one string, so a token meant for several parties is not ours.",
      token: jws(header(), idempotent({ aud: [AUDIENCE, "another-service"] })),
      expect: refused("WRONG_AUDIENCE"),
    },
    {
      name: "refuses-audience-array-without-this-ledger",
      note: "aud as an array of other parties.",
      token: jws(header(), idempotent({ aud: ["another-service"] })),
      expect: refused("WRONG_AUDIENCE"),
    },

    // ---- CLAIM_MISSING ----
    {
      name: "refuses-missing-call-id",
      note: "A required claim (call_id) absent.",
      token: jws(header(), without(idempotent(), "call_id")),
      expect: refused("CLAIM_MISSING"),
    },
    { name: "refuses-missing-sub", note: "The principal (sub) absent.", token: jws(header(), without(idempotent(), "sub")), expect: refused("CLAIM_MISSING") },
    {
      name: "refuses-missing-exp",
      note: "No expiry: a capability without exp would never expire.",
      token: jws(header(), without(idempotent(), "exp")),
      expect: refused("CLAIM_MISSING"),
    },
    {
      name: "refuses-idempotent-without-key",
      note: "effect idempotent requires the derived key.",
      token: jws(header(), without(idempotent(), "key")),
      expect: refused("CLAIM_MISSING"),
    },
    {
      name: "refuses-queryable-without-request-id",
      note: "effect queryable requires request_id.",
      token: jws(header(), without(queryable(), "request_id")),
      expect: refused("CLAIM_MISSING"),
    },
    {
      name: "refuses-several-problems-naming-the-first",
      note: "Expired and missing call_id and tool_id: presence is checked first, in a fixed order, so the reason is CLAIM_MISSING (call_id).",
      token: jws(header(), without(idempotent({ iat: T - 400, exp: T - 100 }), "call_id", "tool_id")),
      expect: refused("CLAIM_MISSING"),
    },

    // ---- CLAIM_INVALID ----
    {
      name: "refuses-attempt-zero",
      note: "attempt must be a positive integer.",
      token: jws(header(), idempotent({ attempt: 0 })),
      expect: refused("CLAIM_INVALID"),
    },
    {
      name: "refuses-attempt-as-string",
      note: "attempt must be a number, not its decimal text.",
      token: jws(header(), idempotent({ attempt: "1" })),
      expect: refused("CLAIM_INVALID"),
    },
    {
      name: "refuses-unknown-effect",
      note: "effect must be idempotent, queryable or unsafe.",
      token: jws(header(), idempotent({ effect: "maybe" })),
      expect: refused("CLAIM_INVALID"),
    },
    {
      name: "refuses-empty-tool-id",
      note: "tool_id must be a non-empty string.",
      token: jws(header(), idempotent({ tool_id: "" })),
      expect: refused("CLAIM_INVALID"),
    },
    {
      name: "refuses-key-on-unsafe",
      note: "A key on an unsafe capability would suggest a keyed write that nothing enforces.",
      token: jws(header(), unsafe({ key: "k3y" })),
      expect: refused("CLAIM_INVALID"),
    },
    {
      name: "refuses-request-id-on-idempotent",
      note: "request_id only belongs to queryable capabilities.",
      token: jws(header(), idempotent({ request_id: "req-1" })),
      expect: refused("CLAIM_INVALID"),
    },
    {
      name: "refuses-iat-as-string",
      note: "Time claims must be numbers.",
      token: jws(header(), idempotent({ iat: String(T - 10) })),
      expect: refused("CLAIM_INVALID"),
    },
    {
      name: "refuses-exp-as-string",
      note: "Time claims must be numbers.",
      token: jws(header(), idempotent({ exp: String(T + 290) })),
      expect: refused("CLAIM_INVALID"),
    },
    {
      name: "refuses-nbf-as-string",
      note: "nbf, when present, must be a number.",
      token: jws(header(), idempotent({ nbf: String(T - 10) })),
      expect: refused("CLAIM_INVALID"),
    },
    {
      name: "refuses-fractional-exp",
      note: "Times are whole seconds: the kernel never mints a fraction.",
      token: jws(header(), idempotent({ exp: T + 290.5 })),
      expect: refused("CLAIM_INVALID"),
    },
    {
      name: "refuses-exp-before-iat",
      note: "exp 1 s before iat, neither outside the clock's tolerance: a negative lifetime is invalid.",
      token: jws(header(), idempotent({ iat: T - 1, exp: T - 2 })),
      expect: refused("CLAIM_INVALID"),
    },

    // ---- LIFETIME_TOO_LONG ----
    {
      name: "refuses-lifetime-of-901-s",
      note: "exp - iat = 901 s: one second over the maximum lifetime.",
      token: jws(header(), idempotent({ iat: T - 10, exp: T + 891 })),
      expect: refused("LIFETIME_TOO_LONG"),
    },
    {
      name: "refuses-lifetime-of-a-day",
      note: "A misconfigured minter signing day-long capabilities.",
      token: jws(header(), idempotent({ iat: T - 10, exp: T - 10 + 86_400 })),
      expect: refused("LIFETIME_TOO_LONG"),
    },
  ];
}

/** An accepted verdict with the `mode` claim, which the mode-aware verifiers return. */
function withMode(verdict: CapabilityVerdict, mode: unknown): CapabilityVerdict {
  if (!("verified" in verdict)) throw new Error("only an accepted verdict has claims");
  return { verified: { ...verdict.verified, mode } };
}

/**
 * Run modes (ADR 0028): a sandbox capability has its own typ, so every verifier that does not
 * know modes refuses it (`expect`: CapabilityVerifier's default, any verifier that pins the
 * live typ); `expect_by` states what the mode-aware verifiers answer instead: the ledger, and
 * the sink SDKs and MCP middlewares of every language (`sink`). A `mode` claim under the live
 * typ is refused by every verifier alike (the typ and the claim disagree).
 */
function sandboxCases(): Case[] {
  const notLive: CapabilityVerdict = { refused: "SANDBOX_CAPABILITY_NOT_LIVE", signature_verified: true };
  const jti = (n: number): string => `9b2e4f6a-1c3d-4e5f-8a7b-0c1d2e3f4b0${n}`;
  const sandbox = (name: string, note: string, claims: Claims): Case => ({
    name,
    note,
    token: jws(header({ typ: SANDBOX_TYP }), claims),
    expect: refused("WRONG_TOKEN_TYPE"),
    expectBy: { ledger: withMode(verified(claims), claims["mode"]), sink: notLive },
  });
  const invalidSandbox = (name: string, note: string, claims: Claims): Case => ({
    name,
    note,
    token: jws(header({ typ: SANDBOX_TYP }), claims),
    expect: refused("WRONG_TOKEN_TYPE"),
    expectBy: { ledger: refused("CLAIM_INVALID"), sink: refused("CLAIM_INVALID") },
  });
  const liveTypWithMode = (name: string, note: string, claims: Claims): Case => ({
    name,
    note,
    token: jws(header(), claims),
    expect: refused("CLAIM_INVALID"),
  });
  return [
    sandbox(
      "sandbox-replay-idempotent",
      "A replay capability: sandbox typ and mode claim. A verifier without modes refuses its typ; the ledger verifies it (and writes nothing with it); a sink refuses it as not live.",
      idempotent({ jti: jti(1), mode: "replay" }),
    ),
    sandbox(
      "sandbox-shadow-queryable",
      "A shadow capability of a queryable call: the ledger verifies it (and writes to its shadow store); a sink refuses it as not live.",
      queryable({ jti: jti(2), mode: "shadow" }),
    ),
    sandbox(
      "sandbox-shadow-unsafe",
      "An unsafe shadow capability (the kernel never mints one): it verifies at the ledger, whose write rule then refuses it SANDBOX_UNSAFE_DENIED.",
      unsafe({ jti: jti(3), mode: "shadow" }),
    ),
    invalidSandbox("refuses-sandbox-typ-without-mode", "The sandbox typ without a mode claim: the typ and the claim must agree.", idempotent({ jti: jti(4) })),
    invalidSandbox("refuses-unknown-mode", "A mode claim that is neither shadow nor replay.", idempotent({ jti: jti(5), mode: "dry-run" })),
    liveTypWithMode(
      "refuses-replay-mode-under-live-typ",
      "A replay mode claim under the live typ (the kernel never signs one): a verifier that read only the typ would take it as live, so every verifier refuses it, the typ and the claim disagreeing.",
      idempotent({ jti: jti(6), mode: "replay" }),
    ),
    liveTypWithMode(
      "refuses-shadow-mode-under-live-typ",
      "A shadow mode claim under the live typ, on an unsafe capability: refused by every verifier before any single-use store sees it.",
      unsafe({ jti: jti(7), mode: "shadow" }),
    ),
    liveTypWithMode(
      "refuses-live-mode-claim",
      'An explicit mode "live": live is the absence of the claim, so it is not a mode a capability may carry.',
      idempotent({ jti: jti(8), mode: "live" }),
    ),
  ];
}

/** Builds the whole corpus (pure: the same bytes on every run). */
export function buildCapabilityVectorFile(): CapabilityVectorFile {
  const vectors: CapabilityVector[] = [...cases(), ...sandboxCases()].map((c) => {
    // Members in reading order; authorization only where it is not `Bearer <token>`.
    return {
      name: c.name,
      note: c.note,
      token: c.token,
      ...(c.authorization === undefined ? {} : { authorization: c.authorization }),
      jwks: c.jwks === undefined ? JWKS : c.jwks,
      clock: c.clock ?? T,
      expect: c.expect,
      ...(c.expectBy ? { expect_by: c.expectBy } : {}),
    };
  });
  return {
    profile: TYP,
    description:
      "Capability-verification vectors for keycap's capability profile (docs/decisions/0003-capability-format.md). " +
      "Each vector: present `authorization` (or, when absent, `Bearer <token>`; null means no authorization metadata) " +
      "to a verifier configured with `verifier`, whose key source serves `jwks` (null: the key set cannot be fetched), " +
      "at time `clock` (seconds since the epoch). `expect.verified` is exactly what the ledger's verifier returns " +
      "(the contract's claims plus the signing kid); `expect.refused` is the refusal reason (ErrorInfo.reason) and " +
      "`signature_verified` whether the refusal came after the signature held. `expect` is what every verifier " +
      "that does not know run modes answers (shadow and replay capabilities carry another typ, ADR 0028); `expect_by` " +
      "(when present) overrides it for the mode-aware verifiers named: `ledger` (verifies them, with `mode`) and " +
      "`sink` (every sink SDK and MCP middleware, TypeScript, Python and Go: refuses them SANDBOX_CAPABILITY_NOT_LIVE). The keys in `keys` are test-only, " +
      "derived from fixed seeds and published with their private parts so the tokens can be re-signed. " +
      "Generated by test/vectors/generate-capability-vectors.ts; checked against the ledger's verifier and, " +
      "differentially, against jose (test/unit/capability_vectors*.spec.ts); the sink SDKs run the same file: TypeScript test/unit/sink_vectors.spec.ts, Python clients/python/tests/test_sink_vectors.py, Go clients/go/sink/vectors_test.go.",
    verifier: {
      issuer: ISSUER,
      audience: AUDIENCE,
      max_token_bytes: MAX_TOKEN_BYTES,
      max_lifetime_seconds: MAX_LIFETIME,
      clock_tolerance_seconds: SKEW,
    },
    keys: {
      "kernel-current": current.privateJwk,
      "kernel-retired": retired.privateJwk,
      attacker: attacker.privateJwk,
      "kernel-encryption": encryption.privateJwk,
    },
    vectors,
  };
}

if (require.main === module) {
  fs.writeFileSync(CAPABILITY_VECTORS_FILE, serializeCapabilityVectorFile(buildCapabilityVectorFile()));
  process.stdout.write(`wrote ${CAPABILITY_VECTORS_FILE}\n`);
}
