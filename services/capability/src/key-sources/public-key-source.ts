/**
 * The verifier's view of where keys come from: a lookup by kid. Implementations parse key
 * material once, never per verification.
 */
import type { KeyObject } from "node:crypto";

/** Where the verifier gets public keys. Implementations parse key material once. */
export interface PublicKeySource {
  /**
   * @returns the key for `kid`, or undefined when the source does not know it.
   * @throws KeycapError UNAVAILABLE / SIGNING_KEYS_UNAVAILABLE when it cannot tell.
   */
  getKey(kid: string): Promise<KeyObject | undefined>;
}
