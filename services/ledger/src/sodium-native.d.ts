/**
 * The one libsodium binding keycap calls (sodium-native ships no types; DefinitelyTyped's
 * are for v2). Signature as documented by sodium-native: throws on buffers of the wrong
 * length, returns whether the detached signature verifies.
 */
declare module "sodium-native" {
  export const crypto_sign_BYTES: number;
  export const crypto_sign_PUBLICKEYBYTES: number;
  export function crypto_sign_verify_detached(signature: Uint8Array, message: Uint8Array, publicKey: Uint8Array): boolean;
}
