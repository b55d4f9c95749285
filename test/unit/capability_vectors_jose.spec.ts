/**
 * Differential test: the ledger's verifier (node:crypto Ed25519 on a strictly parsed token,
 * ADR 0003) against jose 6's jwtVerify, configured as closely as jose allows, over the
 * shared corpus. The safety relation: every token the ledger accepts, jose accepts with the
 * same claims; every token jose refuses, the ledger refuses. The ledger may be stricter,
 * but only where listed below, with the reason: a new disagreement fails the test, and so
 * does a listed one that went away.
 */
import { expect } from "chai";
import { createLocalJWKSet, errors as joseErrors, jwtVerify, type JSONWebKeySet, type JWTPayload } from "jose";
import { CAPABILITY_SANDBOX_TYP, REQUIRED_CLAIMS } from "../../services/capability/src";
import { CapabilityRefusal, type CapabilityRefusalReason } from "../../services/capability/src";
import type { VerifiedCapability } from "../../services/capability/src";
import { authorizationOf, ledgerVerifierFor, loadCapabilityVectors, type CapabilityVector, type CapabilityVectorFile } from "../support/capability-vectors";

/**
 * The vectors only the ledger refuses (jose accepts them), each with the ledger's reason
 * and why the profile is stricter there than a generic JWT library.
 */
const REFUSED_ONLY_BY_KEYCAP: Record<string, { reason: CapabilityRefusalReason; why: string }> = {
  // Size: jose has no limit on the token it is handed.
  "refuses-token-of-4097-bytes": { reason: "CAPABILITY_TOO_LARGE", why: "the profile caps a capability at 4096 bytes; jose has no size limit" },
  "refuses-oversized-authorization": { reason: "CAPABILITY_TOO_LARGE", why: "as above, refused on the metadata length before parsing" },
  // Header: jose picks a key without a kid, ignores jku, and compares typ as a media type.
  "refuses-header-without-kid": { reason: "CAPABILITY_MALFORMED", why: "the profile requires a kid; jose falls back to the only key in the set" },
  "refuses-jku-header": {
    reason: "CAPABILITY_MALFORMED",
    why: "the profile refuses any header member but alg/typ/kid; jose ignores jku (it does not fetch it)",
  },
  "refuses-typ-with-application-prefix": { reason: "WRONG_TOKEN_TYPE", why: "typ is compared exactly; jose normalises the 'application/' prefix" },
  "refuses-typ-in-upper-case": { reason: "WRONG_TOKEN_TYPE", why: "typ is compared exactly; jose compares it case-insensitively" },
  // Encoding: on Node 20 jose decodes base64url with atob, which allows padding and stray bits.
  "refuses-signature-with-stray-bits": { reason: "CAPABILITY_MALFORMED", why: "one token, one spelling: jose's decoder drops the stray bits" },
  "refuses-padded-signature": { reason: "CAPABILITY_MALFORMED", why: "JWS base64url is unpadded; jose's decoder accepts '=' padding" },
  "refuses-payload-with-stray-bits-signed-as-spelled": {
    reason: "CAPABILITY_MALFORMED",
    why: "as for the signature: jose verifies the spelled input and decodes leniently",
  },
  // Key set: the ledger refuses a whole set holding a non-Ed25519 key; jose selects by kid.
  "refuses-when-key-set-holds-non-ed25519-key": {
    reason: "SIGNING_KEYS_UNAVAILABLE",
    why: "a key set with a non-Ed25519 key is a misconfiguration, refused whole; jose uses the matching key",
  },
  // Claims: the capability contract (findClaimProblem, the lifetime bound) is keycap's own.
  "refuses-audience-array-naming-this-ledger": { reason: "WRONG_AUDIENCE", why: "aud must be one string; jose accepts an array containing the audience" },
  "refuses-idempotent-without-key": { reason: "CLAIM_MISSING", why: "the effect/key pairing is keycap's contract, not a registered claim" },
  "refuses-queryable-without-request-id": { reason: "CLAIM_MISSING", why: "the effect/request_id pairing is keycap's contract" },
  "refuses-attempt-zero": { reason: "CLAIM_INVALID", why: "attempt is a keycap claim: a positive integer" },
  "refuses-attempt-as-string": { reason: "CLAIM_INVALID", why: "attempt is a keycap claim: a number" },
  "refuses-unknown-effect": { reason: "CLAIM_INVALID", why: "effect is a keycap claim with three values" },
  "refuses-empty-tool-id": { reason: "CLAIM_INVALID", why: "tool_id is a keycap claim: a non-empty string" },
  "refuses-key-on-unsafe": { reason: "CLAIM_INVALID", why: "a key is only allowed on an idempotent capability" },
  "refuses-request-id-on-idempotent": { reason: "CLAIM_INVALID", why: "request_id is only allowed on a queryable capability" },
  "refuses-fractional-exp": { reason: "CLAIM_INVALID", why: "times are whole seconds; jose accepts any number" },
  "refuses-exp-before-iat": { reason: "CLAIM_INVALID", why: "exp must follow iat; jose checks each against the clock only" },
  "refuses-lifetime-of-901-s": { reason: "LIFETIME_TOO_LONG", why: "exp - iat is bounded by 900 s; jose bounds the age (maxTokenAge), not the lifetime" },
  "refuses-lifetime-of-a-day": { reason: "LIFETIME_TOO_LONG", why: "as above" },
  // Run modes (ADR 0028): the typ/mode pairing and the mode's values are keycap's contract.
  "refuses-sandbox-typ-without-mode": { reason: "CLAIM_INVALID", why: "the sandbox typ requires a mode claim; jose knows neither" },
  "refuses-unknown-mode": { reason: "CLAIM_INVALID", why: "mode is a keycap claim: shadow or replay" },
  "refuses-replay-mode-under-live-typ": { reason: "CLAIM_INVALID", why: "a mode claim requires the sandbox typ; jose knows neither" },
  "refuses-shadow-mode-under-live-typ": { reason: "CLAIM_INVALID", why: "as above" },
  "refuses-live-mode-claim": { reason: "CLAIM_INVALID", why: "mode is a keycap claim: shadow or replay (live is its absence)" },
};

/** The ledger accepts either typ (ADR 0028): jose is given the one the token claims, when it is one of the two. */
function typOf(vector: CapabilityVector, profile: string): string {
  try {
    const header = JSON.parse(Buffer.from(vector.token.split(".")[0] ?? "", "base64url").toString("utf8")) as { typ?: unknown };
    return header.typ === CAPABILITY_SANDBOX_TYP ? CAPABILITY_SANDBOX_TYP : profile;
  } catch {
    return profile;
  }
}

type KeycapOutcome = { accepted: true; claims: Record<string, unknown>; kid: string } | { accepted: false; reason: CapabilityRefusalReason };
type JoseOutcome = { accepted: true; claims: JWTPayload; kid: string | undefined } | { accepted: false; code: string };

async function keycapOutcome(corpus: CapabilityVectorFile, vector: CapabilityVector): Promise<KeycapOutcome> {
  try {
    const { kid, ...claims }: VerifiedCapability = await ledgerVerifierFor(corpus, vector).verify(authorizationOf(vector));
    return { accepted: true, claims, kid };
  } catch (err) {
    if (!(err instanceof CapabilityRefusal)) throw err;
    return { accepted: false, reason: err.reason };
  }
}

async function joseOutcome(corpus: CapabilityVectorFile, vector: CapabilityVector): Promise<JoseOutcome> {
  const s = corpus.verifier;
  try {
    // createLocalJWKSet checks the shape at run time; the corpus reader checked it is {keys: [objects]}.
    const keySet = createLocalJWKSet((vector.jwks ?? { keys: [] }) as JSONWebKeySet);
    const { payload, protectedHeader } = await jwtVerify(vector.token, keySet, {
      algorithms: ["EdDSA"],
      typ: typOf(vector, corpus.profile),
      issuer: s.issuer,
      audience: s.audience,
      clockTolerance: s.clock_tolerance_seconds,
      maxTokenAge: s.max_lifetime_seconds,
      requiredClaims: [...REQUIRED_CLAIMS],
      currentDate: new Date(vector.clock * 1000),
    });
    return { accepted: true, claims: payload, kid: protectedHeader.kid };
  } catch (err) {
    return { accepted: false, code: err instanceof joseErrors.JOSEError ? err.code : err instanceof Error ? err.name : String(err) };
  }
}

const corpus = loadCapabilityVectors();

describe("capability verification vectors: the ledger's verifier against jose 6 (differential)", () => {
  it("lists as refused only by keycap vectors that exist", () => {
    const names = new Set(corpus.vectors.map((v) => v.name));
    for (const name of Object.keys(REFUSED_ONLY_BY_KEYCAP)) expect(names.has(name), name).to.equal(true);
  });

  for (const vector of corpus.vectors) {
    const listed = REFUSED_ONLY_BY_KEYCAP[vector.name];
    const title = listed ? `refused only by keycap (${listed.reason}): ${listed.why}` : "keycap and jose agree";
    it(`${vector.name}: ${title}`, async () => {
      const keycap = await keycapOutcome(corpus, vector);
      const jose = await joseOutcome(corpus, vector);
      if (keycap.accepted) {
        // Safety: nothing the ledger accepts is refused by a stock verifier, and both read the same grant.
        expect(jose.accepted, `jose refused what keycap accepted (${jose.accepted ? "" : jose.code})`).to.equal(true);
        if (!jose.accepted) return;
        expect(jose.kid).to.equal(keycap.kid);
        const joseClaims = Object.fromEntries(Object.keys(keycap.claims).map((name) => [name, jose.claims[name]]));
        expect(joseClaims).to.deep.equal(keycap.claims);
        expect(listed, "listed as refused only by keycap, but keycap accepts it").to.equal(undefined);
        return;
      }
      if (!jose.accepted) {
        // Both refuse: the safety relation holds, and the vector must not be listed as a disagreement.
        expect(listed, `listed as refused only by keycap, but jose refuses it too (${jose.code})`).to.equal(undefined);
        return;
      }
      // keycap refuses, jose accepts: allowed only where the profile is deliberately stricter.
      expect(listed, `new disagreement: keycap refuses ${keycap.reason}, jose accepts`).to.not.equal(undefined);
      expect(keycap.reason).to.equal(listed?.reason);
    });
  }
});
