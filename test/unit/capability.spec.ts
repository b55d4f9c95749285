import { createHmac, generateKeyPairSync, sign, type KeyObject } from "node:crypto";
import { chmod, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { status } from "@grpc/grpc-js";
import { expect } from "chai";
import { calculateJwkThumbprint, createLocalJWKSet, jwtVerify, SignJWT } from "jose";
import { CAPABILITY_TYP, DEFAULT_AUDIENCE, DEFAULT_ISSUER, parseBearer, type CapabilityClaims } from "../../services/capability/src";
import { CapabilityMinter } from "../../services/kernel/src/capability-minter";
import { deriveKey, derivationClaim, derivationOfClaim } from "../../services/common/src/domain/key-derivation";
import { parseArguments } from "../../services/common/src/domain/strict-json";
import { SigningKeyFileError, loadOrCreateSigningKeys, rotateSigningKeys, type SigningKeys } from "../../services/kernel/src/signing-keys";
import { CapabilityRefusal, type CapabilityRefusalReason } from "../../services/capability/src";
import { CapabilityVerifier } from "../../services/capability/src";
import { FileJwksSource, JwksError, RemoteJwksSource, type PublicKeySource } from "../../services/capability/src";

// A fixed, controllable clock shared by kernel and ledger objects in a test.
const T0 = Date.UTC(2030, 0, 1);
const GRACE = 905;

function b64json(v: unknown): string {
  return Buffer.from(JSON.stringify(v)).toString("base64url");
}

/** Signs arbitrary header/payload with an Ed25519 key, bypassing the minter's checks. */
function signEd25519(header: unknown, payload: unknown, key: KeyObject): string {
  const input = `${b64json(header)}.${b64json(payload)}`;
  return `${input}.${sign(null, Buffer.from(input), key).toString("base64url")}`;
}

function bearer(token: string): string {
  return `Bearer ${token}`;
}

async function expectRefusal(p: Promise<unknown>, reason: CapabilityRefusalReason): Promise<CapabilityRefusal> {
  let caught: unknown;
  try {
    await p;
  } catch (err) {
    caught = err;
  }
  expect(caught, `expected a refusal with ${reason}`).to.be.instanceOf(CapabilityRefusal);
  const refusal = caught as CapabilityRefusal;
  expect(refusal.reason).to.equal(reason);
  expect(refusal.code).to.equal(reason === "SIGNING_KEYS_UNAVAILABLE" ? status.UNAVAILABLE : status.UNAUTHENTICATED);
  expect(refusal.message).to.not.include("\n");
  return refusal;
}

/** A key source built from the kernel's published JWKS, as the ledger would see it. */
function sourceFor(keys: SigningKeys): PublicKeySource {
  return new RemoteJwksSource(async () => JSON.stringify(keys.publicJwks()));
}

describe("capability", () => {
  let dir: string;
  let clock: number;
  const now = (): number => clock;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "keycap-cap-"));
    clock = T0;
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  describe("signing key file", () => {
    it("is created 0600 in a 0700 directory and reloads with the same kid", async () => {
      const path = join(dir, "nested", "signing-key.json");
      const created = await loadOrCreateSigningKeys(path, { retiredGraceSeconds: GRACE, now });
      expect((await stat(path)).mode & 0o777).to.equal(0o600);
      expect((await stat(join(dir, "nested"))).mode & 0o777).to.equal(0o700);
      expect(created.insecurePermissions).to.equal(false);

      const reloaded = await loadOrCreateSigningKeys(path, { retiredGraceSeconds: GRACE, now });
      expect(reloaded.currentKid).to.equal(created.currentKid);
      const file = JSON.parse(await readFile(path, "utf8"));
      expect(file.version).to.equal(1);
      expect(file.current.alg).to.equal("EdDSA");
      expect(file.current.created_at).to.equal(T0 / 1000);
      expect(file.retired).to.deep.equal([]);
      // kid is the RFC 7638 thumbprint of the public key.
      expect(created.currentKid).to.equal(await calculateJwkThumbprint({ kty: "OKP", crv: "Ed25519", x: file.current.x }));
    });

    it("flags a key file that group or others can read", async () => {
      const path = join(dir, "k.json");
      await loadOrCreateSigningKeys(path, { retiredGraceSeconds: GRACE });
      await chmod(path, 0o644);
      expect((await loadOrCreateSigningKeys(path, { retiredGraceSeconds: GRACE })).insecurePermissions).to.equal(true);
    });

    async function expectFileError(path: string, problem: RegExp): Promise<void> {
      let caught: unknown;
      try {
        await loadOrCreateSigningKeys(path, { retiredGraceSeconds: GRACE });
      } catch (err) {
        caught = err;
      }
      expect(caught).to.be.instanceOf(SigningKeyFileError);
      const message = (caught as Error).message;
      expect(message).to.include(path);
      expect(message).to.match(problem);
      expect(message).to.not.include("\n");
    }

    it("refuses a file that is not JSON, naming the path, without quoting it", async () => {
      const path = join(dir, "k.json");
      await writeFile(path, `{"version": 1, "current": {"d": "SECRETSECRET"`, { mode: 0o600 });
      await expectFileError(path, /not valid JSON/);
      try {
        await loadOrCreateSigningKeys(path, { retiredGraceSeconds: GRACE });
      } catch (err) {
        expect((err as Error).message).to.not.include("SECRET");
      }
    });

    it("refuses a file of the wrong shape", async () => {
      const path = join(dir, "k.json");
      await writeFile(path, JSON.stringify({ version: 1, keys: [] }), { mode: 0o600 });
      await expectFileError(path, /"current" is missing/);
      await writeFile(path, JSON.stringify([1, 2]), { mode: 0o600 });
      await expectFileError(path, /expected a JSON object/);
      await writeFile(path, JSON.stringify({ version: 2, current: {}, retired: [] }), { mode: 0o600 });
      await expectFileError(path, /unsupported version 2/);
    });

    it("refuses a key on the wrong curve", async () => {
      const path = join(dir, "k.json");
      const x448 = generateKeyPairSync("ed448").privateKey.export({ format: "jwk" });
      await writeFile(path, JSON.stringify({ version: 1, current: { ...x448, kid: "k", alg: "EdDSA", created_at: 1 }, retired: [] }), { mode: 0o600 });
      await expectFileError(path, /not an Ed25519 key/);
      const p256 = generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey.export({ format: "jwk" });
      await writeFile(path, JSON.stringify({ version: 1, current: { ...p256, kid: "k", alg: "EdDSA", created_at: 1 }, retired: [] }), { mode: 0o600 });
      await expectFileError(path, /not an Ed25519 key/);
    });

    it("refuses a private key that does not match its kid", async () => {
      const path = join(dir, "k.json");
      await loadOrCreateSigningKeys(path, { retiredGraceSeconds: GRACE });
      const file = JSON.parse(await readFile(path, "utf8"));
      const other = generateKeyPairSync("ed25519").privateKey.export({ format: "jwk" });
      await writeFile(path, JSON.stringify({ ...file, current: { ...file.current, x: other.x, d: other.d } }), { mode: 0o600 });
      await expectFileError(path, /does not match its kid/);
      await writeFile(path, JSON.stringify({ ...file, current: { ...file.current, d: other.d } }), { mode: 0o600 });
      await expectFileError(path, /does not match its private key/);
    });

    it("refuses a path that cannot be read as a file", async () => {
      await expectFileError(dir, /not a regular file/);
    });

    it("never publishes private key material in the JWKS", async () => {
      const path = join(dir, "k.json");
      const keys = await loadOrCreateSigningKeys(path, { retiredGraceSeconds: GRACE, now });
      const rotated = await rotateSigningKeys(path, { retiredGraceSeconds: GRACE, now });
      for (const jwks of [keys.publicJwks(), rotated.publicJwks()]) {
        expect(JSON.stringify(jwks)).to.not.include('"d"');
        for (const k of jwks.keys) expect(Object.keys(k).sort()).to.deep.equal(["alg", "crv", "kid", "kty", "use", "x"]);
      }
      // The retired entry in the file itself keeps the public part only.
      const file = JSON.parse(await readFile(path, "utf8"));
      expect(file.retired[0]).to.not.have.property("d");
      expect((await stat(path)).mode & 0o777).to.equal(0o600);
    });

    it("rotation retires the old key for the grace period, then drops it", async () => {
      const path = join(dir, "k.json");
      const first = await loadOrCreateSigningKeys(path, { retiredGraceSeconds: GRACE, now });
      const second = await rotateSigningKeys(path, { retiredGraceSeconds: GRACE, now });
      expect(second.currentKid).to.not.equal(first.currentKid);
      expect(second.publicJwks().keys.map((k) => k.kid)).to.deep.equal([second.currentKid, first.currentKid]);

      clock += (GRACE + 1) * 1000;
      expect(second.publicJwks().keys.map((k) => k.kid)).to.deep.equal([second.currentKid]);
      const third = await rotateSigningKeys(path, { retiredGraceSeconds: GRACE, now });
      const file = JSON.parse(await readFile(path, "utf8"));
      expect(file.retired.map((k: { kid: string }) => k.kid)).to.deep.equal([second.currentKid]);
      expect(third.publicJwks().keys).to.have.length(2);
    });
  });

  describe("mint and verify", () => {
    let keys: SigningKeys;
    let minter: CapabilityMinter;
    let verifier: CapabilityVerifier;

    beforeEach(async () => {
      keys = await loadOrCreateSigningKeys(join(dir, "k.json"), { retiredGraceSeconds: GRACE, now });
      minter = new CapabilityMinter(keys, { issuer: DEFAULT_ISSUER, audience: DEFAULT_AUDIENCE, now });
      verifier = new CapabilityVerifier(sourceFor(keys), { issuer: DEFAULT_ISSUER, audience: DEFAULT_AUDIENCE, now });
    });

    /** Valid claims for hand-signed tokens, so each test breaks exactly one thing. */
    function goodClaims(): Record<string, unknown> {
      const iat = Math.floor(clock / 1000);
      return {
        iss: DEFAULT_ISSUER,
        aud: DEFAULT_AUDIENCE,
        sub: "test-runtime",
        tool_id: "payments.charge",
        effect: "idempotent",
        call_id: "call-1",
        attempt: 1,
        jti: "jti-1",
        key: "k3y",
        iat,
        exp: iat + 300,
      };
    }
    function goodHeader(): Record<string, unknown> {
      return { alg: "EdDSA", typ: CAPABILITY_TYP, kid: keys.currentKid };
    }

    it("round-trips every claim of an idempotent capability, with the signing kid", async () => {
      const { token, claims, expiresAt } = await minter.mint({
        principal: "test-runtime",
        toolId: "payments.charge",
        effect: "idempotent",
        callId: "call-1",
        attempt: 2,
        key: "derived-key",
      });
      expect(parseBearer(bearer(token))).to.equal(token);
      const verified = await verifier.verify(bearer(token));
      expect(verified).to.deep.equal({ ...claims, kid: keys.currentKid });
      expect(verified).to.include({
        iss: DEFAULT_ISSUER,
        aud: DEFAULT_AUDIENCE,
        sub: "test-runtime",
        tool_id: "payments.charge",
        effect: "idempotent",
        call_id: "call-1",
        attempt: 2,
        key: "derived-key",
        iat: T0 / 1000,
        exp: T0 / 1000 + 300,
      });
      expect(verified.jti).to.match(/^[0-9a-f-]{36}$/);
      expect(verified).to.not.have.property("request_id");
      expect(expiresAt.getTime()).to.equal(T0 + 300_000);
    });

    it("round-trips queryable and unsafe capabilities", async () => {
      const q = await minter.mint({ principal: "test-runtime", toolId: "t", effect: "queryable", callId: "c", attempt: 1, requestId: "req-9" });
      expect(await verifier.verify(bearer(q.token))).to.include({ effect: "queryable", request_id: "req-9" });
      const u = await minter.mint({ principal: "test-runtime", toolId: "t", effect: "unsafe", callId: "c", attempt: 1, jti: "fixed-jti" });
      const verified = await verifier.verify(bearer(u.token));
      expect(verified).to.include({ effect: "unsafe", jti: "fixed-jti" });
      expect(verified).to.not.have.property("key");
    });

    it("carries the derivation of an idempotent key, so a sink re-derives the key from the arguments it received", async () => {
      const spec = { fields: ["/order_id"], version: 2, contextFields: ["run_id" as const] };
      const args = parseArguments('{"order_id":"A-17","amount":5}');
      const key = deriveKey("payments.charge", spec, args, { runId: "run-1" });
      const { token } = await minter.mint({
        principal: "test-runtime",
        toolId: "payments.charge",
        effect: "idempotent",
        callId: "call-1",
        attempt: 1,
        key,
        derivation: derivationClaim(spec, { runId: "run-1" }),
      });
      const verified = await verifier.verify(bearer(token));
      expect(verified.derivation).to.deep.equal({ version: 2, fields: ["/order_id"], context: { run_id: "run-1" } });
      const stated = derivationOfClaim(verified.derivation!);
      expect(deriveKey(verified.tool_id, stated.spec, args, stated.ctx)).to.equal(verified.key);
      const other = parseArguments('{"order_id":"A-18","amount":5}');
      expect(deriveKey(verified.tool_id, stated.spec, other, stated.ctx)).to.not.equal(verified.key);
      // Without run_id in the derivation, the context stated is empty and so is the one derived with.
      const unscoped = derivationClaim({ fields: ["/order_id"], version: 0, contextFields: [] }, { runId: "run-1" });
      expect(unscoped).to.deep.equal({ version: 1, fields: ["/order_id"], context: {} });
    });

    it("minting the same claims again yields the same token (Ed25519 is deterministic)", async () => {
      const first = await minter.mint({ principal: "test-runtime", toolId: "t", effect: "idempotent", callId: "c", attempt: 1, key: "k" });
      // Stored claims may come back in another member order (e.g. from MongoDB).
      const shuffled = Object.fromEntries(Object.entries(first.claims).reverse()) as unknown as CapabilityClaims;
      expect((await minter.mintWithClaims(shuffled)).token).to.equal(first.token);
    });

    it("mints byte for byte the token jose's SignJWT makes of the same claims, and jose verifies it", async () => {
      const jwks = createLocalJWKSet(keys.publicJwks() as Parameters<typeof createLocalJWKSet>[0]);
      const inputs = [
        { principal: "test-runtime", toolId: "pay.charge", effect: "idempotent" as const, callId: "c-1", attempt: 1, key: "k".repeat(43) },
        {
          principal: "test-runtime",
          toolId: "pay.charge",
          effect: "idempotent" as const,
          callId: "c-4",
          attempt: 2,
          key: "k".repeat(43),
          derivation: { version: 3, fields: ["/order/id", "/a~1b"], context: { run_id: "run ✓" } },
        },
        { principal: "rüntime ✓", toolId: "notify", effect: "queryable" as const, callId: "c-2", attempt: 3, requestId: 'req "quoted" \u2028' },
        { principal: "test-runtime", toolId: "t", effect: "unsafe" as const, callId: "c-3", attempt: 1, jti: "fixed-jti" },
      ];
      for (const input of inputs) {
        const minted = await minter.mint(input);
        const byJose = await new SignJWT({ ...minted.claims })
          .setProtectedHeader({ alg: "EdDSA", typ: CAPABILITY_TYP, kid: keys.currentKid })
          .sign(keys.privateKey);
        expect(minted.token).to.equal(byJose);
        const { payload, protectedHeader } = await jwtVerify(minted.token, jwks, { currentDate: new Date(T0) });
        expect(payload).to.deep.equal(minted.claims);
        expect(protectedHeader).to.deep.equal({ alg: "EdDSA", typ: CAPABILITY_TYP, kid: keys.currentKid });
      }
    });

    it("refuses to mint claims the ledger would refuse", async () => {
      let caught: unknown;
      try {
        await minter.mint({ principal: "test-runtime", toolId: "t", effect: "idempotent", callId: "c", attempt: 1 });
      } catch (err) {
        caught = err;
      }
      expect(caught).to.be.instanceOf(TypeError);
      expect(() => new CapabilityMinter(keys, { lifetimeSeconds: 3600 })).to.throw(RangeError);
    });

    it("refuses a call with no capability", async () => {
      await expectRefusal(verifier.verify(undefined), "CAPABILITY_MISSING");
      await expectRefusal(verifier.verify(""), "CAPABILITY_MISSING");
    });

    it("refuses garbage", async () => {
      await expectRefusal(verifier.verify("Bearer not-a-jws"), "CAPABILITY_MALFORMED");
      await expectRefusal(verifier.verify("Basic dXNlcjpwYXNz"), "CAPABILITY_MALFORMED");
      await expectRefusal(verifier.verify("Bearer a.b.c.d"), "CAPABILITY_MALFORMED");
      await expectRefusal(verifier.verify(`Bearer ${b64json("x")}.${b64json({})}.c2ln`), "CAPABILITY_MALFORMED");
      await expectRefusal(verifier.verify(`Bearer ${"a".repeat(5000)}`), "CAPABILITY_TOO_LARGE");
    });

    it("refuses a well-formed capability signed by a foreign key under a kid the ledger knows", async () => {
      const foreign = generateKeyPairSync("ed25519").privateKey;
      const forged = signEd25519(goodHeader(), goodClaims(), foreign);
      const refusal = await expectRefusal(verifier.verify(bearer(forged)), "BAD_SIGNATURE");
      // The refusal names the tool it claims to be, for the record, but not as verified.
      expect(refusal.unverified).to.include({ toolId: "payments.charge", callId: "call-1", jti: "jti-1", key: "k3y", kid: keys.currentKid });
      expect(refusal.signatureVerified).to.equal(false);
      expect(JSON.stringify(refusal)).to.not.include(forged);
      expect(refusal.message).to.not.include(forged.split(".")[2] ?? "");
    });

    it("refuses a capability signed under a kid the ledger does not know", async () => {
      const foreign = generateKeyPairSync("ed25519").privateKey;
      const forged = signEd25519({ ...goodHeader(), kid: "someone-elses-kid" }, goodClaims(), foreign);
      const refusal = await expectRefusal(verifier.verify(bearer(forged)), "UNKNOWN_KEY_ID");
      expect(refusal.unverified.kid).to.equal("someone-elses-kid");
    });

    it("refuses alg none", async () => {
      const unsigned = `${b64json({ ...goodHeader(), alg: "none" })}.${b64json(goodClaims())}.`;
      await expectRefusal(verifier.verify(bearer(unsigned)), "ALGORITHM_NOT_ALLOWED");
      const withJunkSig = `${b64json({ ...goodHeader(), alg: "none" })}.${b64json(goodClaims())}.c2ln`;
      await expectRefusal(verifier.verify(bearer(withJunkSig)), "ALGORITHM_NOT_ALLOWED");
    });

    it("refuses HS256 keyed with the ledger's public key bytes", async () => {
      const jwk = keys.publicJwks().keys[0];
      const publicKeyBytes = Buffer.from(jwk?.x ?? "", "base64url");
      for (const secret of [publicKeyBytes, Buffer.from(JSON.stringify(jwk))]) {
        const input = `${b64json({ ...goodHeader(), alg: "HS256" })}.${b64json(goodClaims())}`;
        const mac = createHmac("sha256", secret).update(input).digest("base64url");
        await expectRefusal(verifier.verify(bearer(`${input}.${mac}`)), "ALGORITHM_NOT_ALLOWED");
      }
      // Case games are refused too: the algorithm must be exactly "EdDSA".
      const eddsaLower = signEd25519({ ...goodHeader(), alg: "eddsa" }, goodClaims(), keys.privateKey);
      await expectRefusal(verifier.verify(bearer(eddsaLower)), "ALGORITHM_NOT_ALLOWED");
    });

    it("refuses an expired capability, allowing 5 s of clock skew", async () => {
      const { token } = await minter.mint({ principal: "test-runtime", toolId: "t", effect: "unsafe", callId: "c", attempt: 1 });
      clock += 304_000;
      await verifier.verify(bearer(token));
      clock += 2_000;
      const refusal = await expectRefusal(verifier.verify(bearer(token)), "EXPIRED");
      expect(refusal.signatureVerified).to.equal(true);
      expect(refusal.unverified.toolId).to.equal("t");
    });

    it("refuses a capability issued in the future", async () => {
      const { token } = await minter.mint({ principal: "test-runtime", toolId: "t", effect: "unsafe", callId: "c", attempt: 1, iat: T0 / 1000 + 60 });
      await expectRefusal(verifier.verify(bearer(token)), "NOT_YET_VALID");
    });

    it("refuses a capability for another audience or from another issuer", async () => {
      const elsewhere = new CapabilityMinter(keys, { issuer: DEFAULT_ISSUER, audience: "some-other-ledger", now });
      const a = await elsewhere.mint({ principal: "test-runtime", toolId: "t", effect: "unsafe", callId: "c", attempt: 1 });
      await expectRefusal(verifier.verify(bearer(a.token)), "WRONG_AUDIENCE");
      const impostor = new CapabilityMinter(keys, { issuer: "not-the-kernel", audience: DEFAULT_AUDIENCE, now });
      const i = await impostor.mint({ principal: "test-runtime", toolId: "t", effect: "unsafe", callId: "c", attempt: 1 });
      await expectRefusal(verifier.verify(bearer(i.token)), "WRONG_ISSUER");
    });

    it("refuses an audience given as an array, even one that contains this ledger", async () => {
      const token = signEd25519(goodHeader(), { ...goodClaims(), aud: [DEFAULT_AUDIENCE, "other"] }, keys.privateKey);
      await expectRefusal(verifier.verify(bearer(token)), "WRONG_AUDIENCE");
    });

    it("refuses a capability missing a required claim, naming it", async () => {
      const { call_id: _dropped, ...noCallId } = goodClaims();
      const token = signEd25519(goodHeader(), noCallId, keys.privateKey);
      const refusal = await expectRefusal(verifier.verify(bearer(token)), "CLAIM_MISSING");
      expect(refusal.metadata).to.deep.equal({ claim: "call_id" });

      const { key: _key, ...noKey } = goodClaims();
      const noKeyRefusal = await expectRefusal(verifier.verify(bearer(signEd25519(goodHeader(), noKey, keys.privateKey))), "CLAIM_MISSING");
      expect(noKeyRefusal.metadata).to.deep.equal({ claim: "key" });
    });

    it("refuses claims of the wrong type or the wrong pairing, naming the claim", async () => {
      const cases: Array<[Record<string, unknown>, string]> = [
        [{ attempt: 0 }, "attempt"],
        [{ attempt: "1" }, "attempt"],
        [{ effect: "maybe" }, "effect"],
        [{ tool_id: "" }, "tool_id"],
        [{ effect: "unsafe" }, "key"],
        [{ request_id: "r" }, "request_id"],
        [{ effect: "queryable", key: undefined, request_id: "r", derivation: { version: 1, fields: ["/a"], context: {} } }, "derivation"],
        [{ derivation: { version: 0, fields: ["/a"], context: {} } }, "derivation"],
        [{ derivation: { version: 1, fields: [], context: {} } }, "derivation"],
        [{ derivation: { version: 1, fields: ["/a"], context: { run_id: 7 } } }, "derivation"],
        [{ derivation: { version: 1, fields: ["/a"], context: { user: "u" } } }, "derivation"],
        [{ derivation: { version: 1, fields: ["/a"], context: {}, salt: "x" } }, "derivation"],
      ];
      for (const [change, claim] of cases) {
        const token = signEd25519(goodHeader(), { ...goodClaims(), ...change }, keys.privateKey);
        const refusal = await expectRefusal(verifier.verify(bearer(token)), "CLAIM_INVALID");
        expect(refusal.metadata, JSON.stringify(change)).to.deep.equal({ claim });
      }
    });

    it("refuses a tampered payload (tool id flipped, signature kept)", async () => {
      const { token } = await minter.mint({ principal: "test-runtime", toolId: "reports.read", effect: "idempotent", callId: "c", attempt: 1, key: "k" });
      const [h, p, s] = token.split(".");
      const payload = JSON.parse(Buffer.from(p ?? "", "base64url").toString("utf8"));
      const tampered = `${h}.${b64json({ ...payload, tool_id: "payments.refund" })}.${s}`;
      const refusal = await expectRefusal(verifier.verify(bearer(tampered)), "BAD_SIGNATURE");
      expect(refusal.unverified.toolId).to.equal("payments.refund");
    });

    it("refuses a token of another type", async () => {
      for (const typ of ["JWT", undefined, "application/keycap-capability+jwt"]) {
        const token = signEd25519({ ...goodHeader(), typ }, goodClaims(), keys.privateKey);
        await expectRefusal(verifier.verify(bearer(token)), "WRONG_TOKEN_TYPE");
      }
    });

    it("refuses header members outside the profile", async () => {
      const token = signEd25519({ ...goodHeader(), jku: "https://attacker.example/jwks" }, goodClaims(), keys.privateKey);
      await expectRefusal(verifier.verify(bearer(token)), "CAPABILITY_MALFORMED");
      const noKid = signEd25519({ alg: "EdDSA", typ: CAPABILITY_TYP }, goodClaims(), keys.privateKey);
      await expectRefusal(verifier.verify(bearer(noKid)), "CAPABILITY_MALFORMED");
    });

    it("refuses a lifetime longer than the maximum", async () => {
      const c = goodClaims();
      const token = signEd25519(goodHeader(), { ...c, exp: (c["iat"] as number) + 3600 }, keys.privateKey);
      await expectRefusal(verifier.verify(bearer(token)), "LIFETIME_TOO_LONG");
    });

    /** Signs already-encoded parts as they are, so a test controls their exact spelling. */
    function signParts(headerB64: string, payloadB64: string, key: KeyObject = keys.privateKey): string {
      const input = `${headerB64}.${payloadB64}`;
      return `${input}.${sign(null, Buffer.from(input), key).toString("base64url")}`;
    }

    it("refuses base64url that is not the one canonical spelling, even under a good signature", async () => {
      const { token } = await minter.mint({ principal: "test-runtime", toolId: "t", effect: "unsafe", callId: "c", attempt: 1 });
      const [h = "", p = "", s = ""] = token.split(".");
      // An Ed25519 signature is 86 characters; the last one carries 4 spare bits.
      expect(s.length % 4).to.equal(2);
      const respelled = `${h}.${p}.${s.slice(0, -1)}${String.fromCharCode(s.charCodeAt(s.length - 1) + 1)}`;
      expect(Buffer.from(respelled.split(".")[2] ?? "", "base64url").equals(Buffer.from(s, "base64url"))).to.equal(true);
      const refusal = await expectRefusal(verifier.verify(bearer(respelled)), "CAPABILITY_MALFORMED");
      expect(refusal.signatureVerified).to.equal(false);
      await expectRefusal(verifier.verify(bearer(`${h}.${p}.${s}==`)), "CAPABILITY_MALFORMED");
      // A length of 1 mod 4 cannot be base64url at all (Node's decoder drops the odd character).
      await expectRefusal(verifier.verify(bearer(`${h}.${p}.${s}AAA`)), "CAPABILITY_MALFORMED");

      // A payload with a stray bit, signed as spelled: refused for its spelling.
      let payloadB64 = b64json(goodClaims());
      if (payloadB64.length % 4 === 0) payloadB64 = b64json({ ...goodClaims(), jti: "jti-12" });
      expect(payloadB64.length % 4).to.not.equal(0);
      const strayBit = `${payloadB64.slice(0, -1)}${String.fromCharCode(payloadB64.charCodeAt(payloadB64.length - 1) + 1)}`;
      await expectRefusal(verifier.verify(bearer(signParts(b64json(goodHeader()), strayBit))), "CAPABILITY_MALFORMED");
    });

    it("refuses a signed payload that is not a JSON object in UTF-8, as verified; unsigned, as a bad signature", async () => {
      const notUtf8 = Buffer.concat([Buffer.from(JSON.stringify({ ...goodClaims(), note: "" }).slice(0, -2)), Buffer.from([0xff, 0x22, 0x7d])]);
      for (const payloadB64 of [b64json([1, 2]), b64json("claims"), notUtf8.toString("base64url")]) {
        const signed = await expectRefusal(verifier.verify(bearer(signParts(b64json(goodHeader()), payloadB64))), "CAPABILITY_MALFORMED");
        expect(signed.signatureVerified).to.equal(true);
        const foreign = generateKeyPairSync("ed25519").privateKey;
        const forged = await expectRefusal(verifier.verify(bearer(signParts(b64json(goodHeader()), payloadB64, foreign))), "BAD_SIGNATURE");
        expect(forged.signatureVerified).to.equal(false);
      }
    });

    it("refuses a header that is not UTF-8 before checking the signature", async () => {
      const header = Buffer.concat([Buffer.from(JSON.stringify({ ...goodHeader(), kid: keys.currentKid }).slice(0, -2)), Buffer.from([0xc3, 0x22, 0x7d])]);
      // The kid then ends in a stray byte, so it is unknown; a known kid with stray bytes is malformed.
      await expectRefusal(verifier.verify(bearer(signParts(header.toString("base64url"), b64json(goodClaims())))), "UNKNOWN_KEY_ID");
      const withLatin1Kid = new CapabilityVerifier(
        { getKey: async (kid) => (kid === `${keys.currentKid}\ufffd` ? sourceFor(keys).getKey(keys.currentKid) : undefined) },
        { now },
      );
      const refusal = await expectRefusal(withLatin1Kid.verify(bearer(signParts(header.toString("base64url"), b64json(goodClaims())))), "CAPABILITY_MALFORMED");
      expect(refusal.signatureVerified).to.equal(false);
    });

    it("honours nbf, and refuses time claims that are not numbers, naming them", async () => {
      const iat = goodClaims()["iat"] as number;
      await verifier.verify(bearer(signEd25519(goodHeader(), { ...goodClaims(), nbf: iat + 5 }, keys.privateKey)));
      const early = await expectRefusal(
        verifier.verify(bearer(signEd25519(goodHeader(), { ...goodClaims(), nbf: iat + 6 }, keys.privateKey))),
        "NOT_YET_VALID",
      );
      expect(early.signatureVerified).to.equal(true);
      for (const claim of ["iat", "exp", "nbf"]) {
        const token = signEd25519(goodHeader(), { ...goodClaims(), [claim]: String(iat) }, keys.privateKey);
        const refusal = await expectRefusal(verifier.verify(bearer(token)), "CLAIM_INVALID");
        expect(refusal.metadata).to.deep.equal({ claim });
        expect(refusal.signatureVerified).to.equal(true);
      }
    });

    it("refuses a capability issued longer ago than the maximum lifetime, whatever its exp", async () => {
      const iat = (goodClaims()["iat"] as number) - 906;
      const lenient = new CapabilityVerifier(sourceFor(keys), { now, maxLifetimeSeconds: 900 });
      const token = signEd25519(goodHeader(), { ...goodClaims(), iat, exp: iat + 2000 }, keys.privateKey);
      const refusal = await expectRefusal(lenient.verify(bearer(token)), "EXPIRED");
      expect(refusal.signatureVerified).to.equal(true);
    });

    it("refuses a token breaking several rules for the first in a fixed order", async () => {
      const iat = goodClaims()["iat"] as number;
      const expired = { iat: iat - 400, exp: iat - 100 };
      const cases: Array<[Record<string, unknown>, string[], CapabilityRefusalReason, Record<string, string>]> = [
        [{ ...expired }, ["call_id", "tool_id"], "CLAIM_MISSING", { claim: "call_id" }],
        [{ ...expired, iss: "elsewhere" }, [], "WRONG_ISSUER", {}],
        [{ ...expired, iss: "elsewhere", aud: "elsewhere" }, [], "WRONG_ISSUER", {}],
        [{ ...expired, aud: "elsewhere" }, [], "WRONG_AUDIENCE", {}],
        [{ ...expired, aud: [DEFAULT_AUDIENCE, "other"] }, [], "EXPIRED", {}],
        [{ ...expired, attempt: 0 }, [], "EXPIRED", {}],
        [{ iat: iat - 10, exp: iat + 3600, attempt: 0 }, [], "CLAIM_INVALID", { claim: "attempt" }],
        [{ iat: iat + 60, exp: iat + 4000 }, [], "NOT_YET_VALID", {}],
      ];
      for (const [change, drop, reason, metadata] of cases) {
        const claims: Record<string, unknown> = { ...goodClaims(), ...change };
        for (const claim of drop) delete claims[claim];
        const refusal = await expectRefusal(verifier.verify(bearer(signEd25519(goodHeader(), claims, keys.privateKey))), reason);
        expect(refusal.metadata, JSON.stringify(change)).to.deep.equal(metadata);
        expect(refusal.signatureVerified).to.equal(true);
      }
    });

    it("refuses to verify with a key source's key of another type", async () => {
      const token = signEd25519(goodHeader(), goodClaims(), keys.privateKey);
      const rsa = generateKeyPairSync("rsa", { modulusLength: 2048 }).publicKey;
      for (const wrong of [rsa, keys.privateKey]) {
        const odd = new CapabilityVerifier({ getKey: async () => wrong }, { now });
        const refusal = await expectRefusal(odd.verify(bearer(token)), "BAD_SIGNATURE");
        expect(refusal.signatureVerified).to.equal(false);
      }
    });

    it("still verifies a capability minted before a rotation, during the grace period", async () => {
      const path = join(dir, "k.json");
      const before = await minter.mint({ principal: "test-runtime", toolId: "t", effect: "idempotent", callId: "c", attempt: 1, key: "k" });
      const rotated = await rotateSigningKeys(path, { retiredGraceSeconds: GRACE, now });
      const ledger = new CapabilityVerifier(sourceFor(rotated), { now });
      expect((await ledger.verify(bearer(before.token))).kid).to.equal(keys.currentKid);
      const after = await new CapabilityMinter(rotated, { now }).mint({ principal: "test-runtime", toolId: "t", effect: "unsafe", callId: "c", attempt: 2 });
      expect((await ledger.verify(bearer(after.token))).kid).to.equal(rotated.currentKid);

      // Past the grace period the kernel stops publishing the old key.
      clock += (GRACE + 1) * 1000;
      const later = new CapabilityVerifier(sourceFor(rotated), { now, maxLifetimeSeconds: 10_000 });
      await expectRefusal(later.verify(bearer(before.token)), "UNKNOWN_KEY_ID");
    });
  });

  describe("public key sources", () => {
    let keys: SigningKeys;
    let minter: CapabilityMinter;

    beforeEach(async () => {
      keys = await loadOrCreateSigningKeys(join(dir, "k.json"), { retiredGraceSeconds: GRACE, now });
      minter = new CapabilityMinter(keys, { now });
    });

    it("refetches the JWKS on an unknown kid, at most once per cooldown, waiting for it rather than refusing", async () => {
      let fetches = 0;
      let published = keys;
      const waits: number[] = [];
      const source = new RemoteJwksSource(
        async () => {
          fetches += 1;
          return JSON.stringify(published.publicJwks());
        },
        {
          refetchCooldownMs: 5000,
          now,
          sleep: async (ms) => {
            waits.push(ms);
            clock += ms;
          },
        },
      );
      const verifier = new CapabilityVerifier(source, { now });
      const known = await minter.mint({ principal: "test-runtime", toolId: "t", effect: "unsafe", callId: "c", attempt: 1 });
      await verifier.verify(bearer(known.token));
      await verifier.verify(bearer(known.token));
      expect(fetches).to.equal(1);

      const stranger = signEd25519({ alg: "EdDSA", typ: CAPABILITY_TYP, kid: "unknown-kid" }, known.claims, generateKeyPairSync("ed25519").privateKey);
      clock += 1000;
      await expectRefusal(verifier.verify(bearer(stranger)), "UNKNOWN_KEY_ID");
      expect(waits).to.deep.equal([4000]); // waited out the cooldown of the first fetch
      expect(fetches).to.equal(2);
      clock += 5000;
      await Promise.all(Array.from({ length: 10 }, () => expectRefusal(verifier.verify(bearer(stranger)), "UNKNOWN_KEY_ID")));
      expect(fetches).to.equal(3); // one shared refetch for ten concurrent lookups
      await Promise.all(Array.from({ length: 10 }, () => expectRefusal(verifier.verify(bearer(stranger)), "UNKNOWN_KEY_ID")));
      expect(fetches).to.equal(4); // ten more within the cooldown: one shared wait, one fetch
      expect(waits).to.deep.equal([4000, 5000]);

      // A key rotated in moments after the last fetch is learned, not refused.
      published = await rotateSigningKeys(join(dir, "k.json"), { retiredGraceSeconds: GRACE, now });
      clock += 100;
      const fresh = await new CapabilityMinter(published, { now }).mint({ principal: "test-runtime", toolId: "t", effect: "unsafe", callId: "c", attempt: 2 });
      expect((await verifier.verify(bearer(fresh.token))).kid).to.equal(published.currentKid);
      expect(fetches).to.equal(5);
      await verifier.verify(bearer(known.token)); // the retired key is still published
      expect(fetches).to.equal(5);
    });

    it("answers UNAVAILABLE when the keys cannot be fetched and none is cached", async () => {
      let fetches = 0;
      const source = new RemoteJwksSource(
        async () => {
          fetches += 1;
          throw new Error("connection refused");
        },
        { now, sleep: async (ms) => void (clock += ms) },
      );
      const { token } = await minter.mint({ principal: "test-runtime", toolId: "t", effect: "unsafe", callId: "c", attempt: 1 });
      const verifier = new CapabilityVerifier(source, { now });
      const refusal = await expectRefusal(verifier.verify(bearer(token)), "SIGNING_KEYS_UNAVAILABLE");
      expect(refusal.unverified.toolId).to.equal("t");
      // Within the cooldown the next lookup waits for the next allowed fetch: one per cooldown.
      await Promise.all([1, 2, 3].map(() => expectRefusal(verifier.verify(bearer(token)), "SIGNING_KEYS_UNAVAILABLE")));
      expect(fetches).to.equal(2);
    });

    it('names the cause a failed fetch wraps (Node\'s fetch says only "fetch failed")', async () => {
      const source = new RemoteJwksSource(async () => {
        throw new Error("fetch failed", { cause: new Error("connect ECONNREFUSED 127.0.0.1:50051") });
      });
      const { token } = await minter.mint({ principal: "test-runtime", toolId: "t", effect: "unsafe", callId: "c", attempt: 1 });
      const refusal = await expectRefusal(new CapabilityVerifier(source, { now }).verify(bearer(token)), "SIGNING_KEYS_UNAVAILABLE");
      expect(refusal.message).to.include("fetch failed: connect ECONNREFUSED 127.0.0.1:50051");
    });

    it("keeps fetching in the background while the kernel is unreachable, and learns the keys without waiting for a write", async () => {
      let up = false;
      let fetches = 0;
      let recovered = 0;
      const source = new RemoteJwksSource(
        async () => {
          fetches += 1;
          if (!up) throw new Error("connect ECONNREFUSED");
          return JSON.stringify(keys.publicJwks());
        },
        { retryInitialMs: 5, retryMaxMs: 20, onRecovered: () => (recovered += 1) },
      );
      try {
        await source.refresh();
        await new Promise((r) => setTimeout(r, 100));
        expect(fetches, "retried while failing").to.be.within(4, 25);
        up = true;
        await new Promise((r) => setTimeout(r, 60));
        expect(recovered).to.equal(1);
        const settled = fetches;
        await new Promise((r) => setTimeout(r, 60));
        expect(fetches, "no retries once the keys are known").to.equal(settled);
        const { token } = await minter.mint({ principal: "test-runtime", toolId: "t", effect: "unsafe", callId: "c", attempt: 1 });
        await new CapabilityVerifier(source, { now }).verify(bearer(token));
        expect(fetches).to.equal(settled);
      } finally {
        source.close();
      }
    });

    it("keeps verifying with cached keys while the kernel is unreachable", async () => {
      let up = true;
      const source = new RemoteJwksSource(
        async () => {
          if (!up) throw new Error("down");
          return JSON.stringify(keys.publicJwks());
        },
        { now },
      );
      const verifier = new CapabilityVerifier(source, { now });
      const { token } = await minter.mint({ principal: "test-runtime", toolId: "t", effect: "unsafe", callId: "c", attempt: 1 });
      await verifier.verify(bearer(token));
      up = false;
      clock += 10_000;
      await verifier.verify(bearer(token));
    });

    it("refuses a JWKS response that holds a private key", async () => {
      const file = JSON.parse(await readFile(join(dir, "k.json"), "utf8"));
      const source = new RemoteJwksSource(async () => JSON.stringify({ keys: [file.current] }), { now });
      const { token } = await minter.mint({ principal: "test-runtime", toolId: "t", effect: "unsafe", callId: "c", attempt: 1 });
      const refusal = await expectRefusal(new CapabilityVerifier(source, { now }).verify(bearer(token)), "SIGNING_KEYS_UNAVAILABLE");
      expect(refusal.message).to.include("private key material");
      expect(refusal.message).to.not.include(file.current.d);
    });

    it("loads a JWKS file and verifies with it", async () => {
      const path = join(dir, "jwks.json");
      await writeFile(path, JSON.stringify(keys.publicJwks()));
      const verifier = new CapabilityVerifier(await FileJwksSource.load(path), { now });
      const { token } = await minter.mint({ principal: "test-runtime", toolId: "t", effect: "queryable", callId: "c", attempt: 1, requestId: "r" });
      expect(await verifier.verify(bearer(token))).to.include({ request_id: "r" });
    });

    async function expectJwksFileRefused(path: string, problem: RegExp): Promise<void> {
      let caught: unknown;
      try {
        await FileJwksSource.load(path);
      } catch (err) {
        caught = err;
      }
      expect(caught).to.be.instanceOf(JwksError);
      expect((caught as Error).message)
        .to.include(path)
        .and.match(problem)
        .and.not.include("\n");
    }

    it("refuses a JWKS file holding a private JWK", async () => {
      const file = JSON.parse(await readFile(join(dir, "k.json"), "utf8"));
      const path = join(dir, "jwks.json");
      await writeFile(path, JSON.stringify({ keys: [...keys.publicJwks().keys, file.current] }));
      await expectJwksFileRefused(path, /private key material/);
    });

    it("refuses a JWKS file holding a non-Ed25519 key, or no keys", async () => {
      const path = join(dir, "jwks.json");
      const ec = { ...generateKeyPairSync("ec", { namedCurve: "P-256" }).publicKey.export({ format: "jwk" }), kid: "ec" };
      await writeFile(path, JSON.stringify({ keys: [ec] }));
      await expectJwksFileRefused(path, /not an Ed25519 key/);
      await writeFile(path, JSON.stringify({ keys: [] }));
      await expectJwksFileRefused(path, /no keys/);
      await writeFile(path, "not json");
      await expectJwksFileRefused(path, /not valid JSON/);
    });
  });
});
