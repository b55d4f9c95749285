/**
 * The libsodium bindings keycap calls (sodium-native ships no types; DefinitelyTyped's are
 * for v2): Ed25519 verification in the ledger, signing in the kernel. As documented by
 * sodium-native, both throw on buffers of the wrong length.
 */
declare module "sodium-native" {
  export const crypto_sign_BYTES: number;
  export const crypto_sign_PUBLICKEYBYTES: number;
  export const crypto_sign_SECRETKEYBYTES: number;
  /** Writes the detached signature of `message` under `secretKey` (seed ‖ public key) into `signature`. */
  export function crypto_sign_detached(signature: Uint8Array, message: Uint8Array, secretKey: Uint8Array): void;
  export function crypto_sign_verify_detached(signature: Uint8Array, message: Uint8Array, publicKey: Uint8Array): boolean;
}
