/**
 * Ed25519 signing for capabilities, through libsodium (sodium-native): half the CPU of
 * OpenSSL's Ed25519 in node:crypto on this machine (≈ 21 vs 40 µs per signature, one
 * core). Ed25519 is deterministic, so the signature is byte for byte the one node:crypto
 * would make (ADR 0003; test/unit/ed25519.spec.ts).
 */
import type { KeyObject } from "node:crypto";
import { crypto_sign_BYTES, crypto_sign_SECRETKEYBYTES, crypto_sign_detached } from "sodium-native";

/** libsodium's secret key (seed ‖ public key) per key object, exported once. */
const secretKeys = new WeakMap<KeyObject, Buffer>();

function secretKeyOf(key: KeyObject): Buffer {
  let sk = secretKeys.get(key);
  if (sk === undefined) {
    if (key.type !== "private" || key.asymmetricKeyType !== "ed25519") throw new TypeError("not an Ed25519 private key");
    const jwk = key.export({ format: "jwk" });
    if (typeof jwk.d !== "string" || typeof jwk.x !== "string") throw new TypeError("Ed25519 private key has no seed or public part");
    sk = Buffer.concat([Buffer.from(jwk.d, "base64url"), Buffer.from(jwk.x, "base64url")]);
    if (sk.length !== crypto_sign_SECRETKEYBYTES) throw new TypeError("Ed25519 private key has the wrong length");
    secretKeys.set(key, sk);
  }
  return sk;
}

/** The Ed25519 signature (RFC 8032, PureEdDSA) of `message` under `key`. */
export function signEd25519(message: Uint8Array, key: KeyObject): Buffer {
  const signature = Buffer.alloc(crypto_sign_BYTES);
  crypto_sign_detached(signature, message, secretKeyOf(key));
  return signature;
}
