/**
 * Capabilities are signed and verified with libsodium instead of node:crypto (ADR 0003).
 * Whatever node:crypto (OpenSSL) accepts or refuses, the verifier must too — on valid
 * signatures, on any flipped bit, on a non-canonical S — the signer must produce the same
 * bytes, and the RFC 8032 vectors must hold for both.
 */
import { expect } from "chai";
import { createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes, sign, verify } from "node:crypto";
import { signEd25519 } from "../../services/kernel/src/ed25519-sign";
import { verifyEd25519 } from "../../services/capability/src";

/** RFC 8032 §7.1, TEST 1 and TEST 3: secret seed, public key, message, signature (hex). */
const RFC8032 = [
  {
    seed: "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
    pk: "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
    msg: "",
    sig: "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
  },
  {
    seed: "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
    pk: "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
    msg: "af82",
    sig: "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
  },
];

function publicKeyFromRaw(hex: string): ReturnType<typeof createPublicKey> {
  return createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: Buffer.from(hex, "hex").toString("base64url") }, format: "jwk" });
}

/** The group order L of Ed25519, little-endian, to build S + L (same point, non-canonical scalar). */
const L = 2n ** 252n + 27742317777372353535851937790883648493n;

function addL(sig: Buffer): Buffer {
  let s = 0n;
  for (let i = 31; i >= 0; i--) s = (s << 8n) | BigInt(sig[32 + i]!);
  s += L;
  const out = Buffer.from(sig);
  for (let i = 0; i < 32; i++) {
    out[32 + i] = Number(s & 0xffn);
    s >>= 8n;
  }
  return out;
}

describe("Ed25519 verification (libsodium)", () => {
  it("accepts the RFC 8032 test vectors and refuses them under another message", () => {
    for (const v of RFC8032) {
      const key = publicKeyFromRaw(v.pk);
      expect(verifyEd25519(Buffer.from(v.msg, "hex"), Buffer.from(v.sig, "hex"), key)).to.equal(true);
      expect(verifyEd25519(Buffer.from(v.msg + "00", "hex"), Buffer.from(v.sig, "hex"), key)).to.equal(false);
    }
  });

  it("agrees with node:crypto on valid signatures and on every single flipped bit of message and signature", () => {
    const { publicKey, privateKey } = generateKeyPairSync("ed25519");
    const msg = randomBytes(48);
    const sig = sign(null, msg, privateKey);
    expect(verifyEd25519(msg, sig, publicKey)).to.equal(true);
    for (const [which, buf] of [
      ["message", msg],
      ["signature", sig],
    ] as const) {
      for (let bit = 0; bit < buf.length * 8; bit++) {
        const m = which === "message" ? Buffer.from(msg) : msg;
        const s = which === "signature" ? Buffer.from(sig) : sig;
        (which === "message" ? m : s)[bit >> 3]! ^= 1 << (bit & 7);
        const ours = verifyEd25519(m, s, publicKey);
        expect(ours, `${which} bit ${bit}`).to.equal(verify(null, m, publicKey, s));
        expect(ours, `${which} bit ${bit}`).to.equal(false);
      }
    }
  });

  it("refuses a non-canonical S (S + L), as node:crypto does", () => {
    const { publicKey, privateKey } = generateKeyPairSync("ed25519");
    const msg = Buffer.from("capability");
    const sig = addL(sign(null, msg, privateKey));
    expect(verify(null, msg, publicKey, sig)).to.equal(false);
    expect(verifyEd25519(msg, sig, publicKey)).to.equal(false);
  });

  it("refuses a signature under another key, and signatures of the wrong length", () => {
    const a = generateKeyPairSync("ed25519");
    const b = generateKeyPairSync("ed25519");
    const msg = Buffer.from("capability");
    const sig = sign(null, msg, a.privateKey);
    expect(verifyEd25519(msg, sig, b.publicKey)).to.equal(false);
    expect(verifyEd25519(msg, sig.subarray(0, 63), a.publicKey)).to.equal(false);
    expect(verifyEd25519(msg, Buffer.concat([sig, Buffer.alloc(1)]), a.publicKey)).to.equal(false);
    expect(verifyEd25519(msg, Buffer.alloc(0), a.publicKey)).to.equal(false);
  });

  it("throws for a key that is not an Ed25519 public key", () => {
    const ed = generateKeyPairSync("ed25519");
    const ec = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const msg = Buffer.from("capability");
    const sig = sign(null, msg, ed.privateKey);
    expect(() => verifyEd25519(msg, sig, ed.privateKey)).to.throw(/not an Ed25519 public key/);
    expect(() => verifyEd25519(msg, sig, ec.publicKey)).to.throw(/not an Ed25519 public key/);
  });

  it("signs the RFC 8032 vectors to their exact signatures, and any message as node:crypto does, byte for byte", () => {
    for (const v of RFC8032) {
      const key = createPrivateKey({
        key: { kty: "OKP", crv: "Ed25519", d: Buffer.from(v.seed, "hex").toString("base64url"), x: Buffer.from(v.pk, "hex").toString("base64url") },
        format: "jwk",
      });
      expect(signEd25519(Buffer.from(v.msg, "hex"), key).toString("hex")).to.equal(v.sig);
    }
    const { publicKey, privateKey } = generateKeyPairSync("ed25519");
    for (let i = 0; i < 50; i++) {
      const msg = randomBytes(i * 13);
      const ours = signEd25519(msg, privateKey);
      expect(ours.equals(sign(null, msg, privateKey)), `message of ${msg.length} bytes`).to.equal(true);
      expect(verifyEd25519(msg, ours, publicKey)).to.equal(true);
    }
  });

  it("refuses to sign with a key that is not an Ed25519 private key", () => {
    const ed = generateKeyPairSync("ed25519");
    const ec = generateKeyPairSync("ec", { namedCurve: "P-256" });
    expect(() => signEd25519(Buffer.from("x"), ed.publicKey)).to.throw(/not an Ed25519 private key/);
    expect(() => signEd25519(Buffer.from("x"), ec.privateKey)).to.throw(/not an Ed25519 private key/);
  });
});
