/**
 * Ed25519 signature verification for capabilities, through libsodium (sodium-native):
 * half the CPU of OpenSSL's Ed25519 in node:crypto on this machine (≈ 53 vs 110 µs per
 * verification, one core), and verification is the cost of enforcement on every write
 * (ADR 0003, "Verification").
 */
import type { KeyObject } from "node:crypto";
import { crypto_sign_BYTES, crypto_sign_PUBLICKEYBYTES, crypto_sign_verify_detached } from "sodium-native";

/** Raw public key bytes per key object: keys are parsed once by their source, exported once here. */
const rawKeys = new WeakMap<KeyObject, Buffer>();

function rawPublicKey(key: KeyObject): Buffer {
  let raw = rawKeys.get(key);
  if (raw === undefined) {
    if (key.type !== "public" || key.asymmetricKeyType !== "ed25519") throw new TypeError("not an Ed25519 public key");
    const x = key.export({ format: "jwk" }).x;
    raw = typeof x === "string" ? Buffer.from(x, "base64url") : Buffer.alloc(0);
    if (raw.length !== crypto_sign_PUBLICKEYBYTES) throw new TypeError("Ed25519 public key has the wrong length");
    rawKeys.set(key, raw);
  }
  return raw;
}

/**
 * Whether `signature` is a valid Ed25519 signature of `message` under `key` (RFC 8032;
 * libsodium also refuses a non-canonical S and small-order public keys). Throws for a key
 * that is not an Ed25519 public key; a signature of the wrong length is false.
 */
export function verifyEd25519(message: Uint8Array, signature: Uint8Array, key: KeyObject): boolean {
  const pk = rawPublicKey(key);
  if (signature.length !== crypto_sign_BYTES) return false;
  return crypto_sign_verify_detached(signature, message, pk);
}
