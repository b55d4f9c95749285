/**
 * The kernel's published keys (GetSigningKeys), cached by kid and refetched when an
 * unknown kid shows up: how the ledger learns a rotated-in key without a restart.
 */
import { status } from "@grpc/grpc-js";
import type { KeyObject } from "node:crypto";
import { KeycapError } from "../../../common/src/errors";
import { parseJwks } from "./jwks";
import type { PublicKeySource } from "./public-key-source";

/** Options for {@link RemoteJwksSource}. */
export interface RemoteJwksSourceOptions {
  /** Least time between two fetches, in milliseconds. Default 1000. */
  refetchCooldownMs?: number;
  /** Clock, in milliseconds since the epoch (like `Date.now`). Default `Date.now`. */
  now?: () => number;
  /** Waits `ms` milliseconds (tests pass one that moves their clock). Default a timer. */
  sleep?: (ms: number) => Promise<void>;
  /** Told why a fetch failed (the ledger logs it). */
  onFetchError?: (cause: string) => void;
}

/**
 * Keys fetched from the kernel (GetSigningKeys), cached by kid. An unknown kid triggers a
 * refetch (that is how a rotated-in key is learned), at most once per cooldown, so a flood
 * of tokens with made-up kids cannot turn into a flood of kernel calls. Concurrent
 * lookups share one in-flight fetch.
 *
 * A kid is reported unknown only while the latest fetch succeeded. If it failed, the
 * ledger cannot tell a forged kid from a freshly rotated one, so it answers UNAVAILABLE
 * (retry later) rather than accuse the tool.
 *
 * @example
 * const fetcher = new KernelJwksFetcher(() => config.kernelAddress);
 * const source = new RemoteJwksSource(() => fetcher.fetch(), { refetchCooldownMs: 1000 });
 */
export class RemoteJwksSource implements PublicKeySource {
  private keys = new Map<string, KeyObject>();
  private lastFetchAt: number | undefined;
  private lastFetchError: string | undefined;
  private inFlight: Promise<void> | undefined;
  private readonly cooldownMs: number;
  private readonly now: () => number;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly onFetchError: ((cause: string) => void) | undefined;

  /**
   * @param fetchJwksJson returns the JWKS as JSON text (e.g. from GetSigningKeys).
   */
  constructor(
    private readonly fetchJwksJson: () => Promise<string>,
    opts: RemoteJwksSourceOptions = {},
  ) {
    this.cooldownMs = opts.refetchCooldownMs ?? 1000;
    this.onFetchError = opts.onFetchError;
    this.now = opts.now ?? Date.now;
    this.sleep = opts.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
    if (!Number.isFinite(this.cooldownMs) || this.cooldownMs < 0) throw new RangeError("refetchCooldownMs must be >= 0");
  }

  /** @inheritdoc */
  async getKey(kid: string): Promise<KeyObject | undefined> {
    const cached = this.keys.get(kid);
    if (cached) return cached;
    if (!this.inFlight) {
      // An unknown kid may be the key the kernel has just rotated to: rather than refuse it
      // during the cooldown, wait for the next allowed fetch. Every lookup in the meantime
      // shares that wait and that one fetch, so made-up kids still cost at most one kernel
      // call per cooldown (and a wait of at most one cooldown each).
      const wait = this.lastFetchAt === undefined ? 0 : Math.max(0, this.cooldownMs - (this.now() - this.lastFetchAt));
      this.inFlight = (wait > 0 ? this.sleep(wait) : Promise.resolve())
        .then(() => this.refetch())
        .finally(() => {
          this.inFlight = undefined;
        });
    }
    await this.inFlight;
    const key = this.keys.get(kid);
    if (key) return key;
    if (this.lastFetchError !== undefined) {
      throw new KeycapError(status.UNAVAILABLE, "SIGNING_KEYS_UNAVAILABLE", `the kernel's signing keys could not be fetched: ${this.lastFetchError}`);
    }
    return undefined;
  }

  private async refetch(): Promise<void> {
    this.lastFetchAt = this.now();
    try {
      const json = await this.fetchJwksJson();
      // Replace, not merge: a key the kernel stopped publishing (retired past its grace
      // period) must stop verifying here too.
      this.keys = parseJwks(json);
      this.lastFetchError = undefined;
    } catch (err) {
      // Keep the keys we had: the kernel being briefly unreachable must not stop the
      // ledger from verifying capabilities signed with keys it already knows.
      // The cause, not a bare "fetch failed": it is what the refused caller and the log need.
      this.lastFetchError = err instanceof Error ? (err.message.split("\n")[0] ?? "fetch failed") : String(err);
      this.onFetchError?.(this.lastFetchError);
    }
  }
}
