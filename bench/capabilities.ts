/**
 * Capabilities minted ahead of a run, exactly as the kernel mints them: the kernel's own
 * key file (KEYCAP_DATA_DIR/signing-keys.json) loaded with the kernel's loader, signed by
 * the kernel's CapabilityMinter. Minting happens before the measured window, so the
 * ledger sees a stream of fresh, never-seen capabilities without the kernel in the path.
 */
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { CapabilityMinter } from "../services/kernel/src/capability-minter";
import { loadOrCreateSigningKeys } from "../services/kernel/src/signing-keys";
import { BENCH_PRINCIPAL } from "./bench-ids";

/** One request of a pool: the key the Write carries and the capability it presents. */
export interface PoolItem {
  /** The `key` field of the request. */
  key: string;
  /** The capability (compact JWS), without "Bearer ". */
  token: string;
}

/** Mints pools of capabilities with the kernel's signing key. */
export class CapabilityFactory {
  private constructor(private readonly minter: CapabilityMinter) {}

  /** Loads the kernel's key file (the kernel must have created it). */
  static async open(signingKeyFile: string): Promise<CapabilityFactory> {
    const keys = await loadOrCreateSigningKeys(signingKeyFile, { retiredGraceSeconds: 86400 });
    return new CapabilityFactory(new CapabilityMinter(keys, { lifetimeSeconds: 600 }));
  }

  /** The raw minter (for the micro benchmark). */
  get raw(): CapabilityMinter {
    return this.minter;
  }

  /**
   * `n` capabilities for tool `toolId`.
   * @param keyOf the key bound in capability i
   * @param requestKeyOf the key request i carries (default: the bound one; a different
   *   one makes a KEY_MISMATCH refusal)
   */
  async mint(
    n: number,
    toolId: string,
    keyOf: (i: number) => string,
    opts: { attempt?: number; requestKeyOf?: (i: number) => string } = {},
  ): Promise<PoolItem[]> {
    const out: PoolItem[] = new Array(n);
    for (let i = 0; i < n; i++) {
      const key = keyOf(i);
      const { token } = await this.minter.mint({
        principal: BENCH_PRINCIPAL,
        toolId,
        effect: "idempotent",
        // A UUID, as the kernel gives a call without an id of its own.
        callId: randomUUID(),
        attempt: opts.attempt ?? 1,
        key,
      });
      out[i] = { key: opts.requestKeyOf ? opts.requestKeyOf(i) : key, token };
    }
    return out;
  }
}

/** A key of the same shape as a kernel-derived one (43 base64url characters), unique per (space, i). */
export function benchKey(space: string, i: number): string {
  return createHash("sha256").update(`${space}/${i}`).digest("base64url");
}

/** A fresh key space, so no two runs collide. */
export function newKeySpace(label: string): string {
  return `${label}-${randomBytes(6).toString("hex")}`;
}
