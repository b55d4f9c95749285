/**
 * The kernel's published keys (GetSigningKeys), cached by kid and refetched when an
 * unknown kid shows up: how the ledger learns a rotated-in key without a restart.
 */
import type { KeyObject } from "node:crypto";
import { parseJwks } from "./jwks";
import type { PublicKeySource } from "./public-key-source";
import { Reasons, refuse } from "../../../common/src/refuse";

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
  /** Told when a fetch succeeds after failing (or for the first time). */
  onRecovered?: () => void;
  /**
   * While the latest fetch failed, fetch again after this long, doubling up to
   * `retryMaxMs`; a lookup in the meantime waits for that fetch instead of the cooldown.
   * Milliseconds; default 0: no background retries (the ledger turns them on).
   */
  retryInitialMs?: number;
  /** Longest wait between two retries while failing, in milliseconds. Default 500. */
  retryMaxMs?: number;
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
  private neverFetched = true;
  private inFlight: Promise<void> | undefined;
  private readonly cooldownMs: number;
  private readonly now: () => number;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly onFetchError: ((cause: string) => void) | undefined;
  private readonly onRecovered: (() => void) | undefined;
  private readonly retryInitialMs: number;
  private readonly retryMaxMs: number;
  private retryDelayMs: number;
  private retryTimer: NodeJS.Timeout | undefined;
  private nextRetryAt: number | undefined;
  private closed = false;

  /**
   * @param fetchJwksJson returns the JWKS as JSON text (e.g. from GetSigningKeys).
   */
  constructor(
    private readonly fetchJwksJson: () => Promise<string>,
    opts: RemoteJwksSourceOptions = {},
  ) {
    this.cooldownMs = opts.refetchCooldownMs ?? 1000;
    this.onFetchError = opts.onFetchError;
    this.onRecovered = opts.onRecovered;
    this.retryInitialMs = opts.retryInitialMs ?? 0;
    this.retryMaxMs = Math.max(this.retryInitialMs, opts.retryMaxMs ?? 500);
    this.retryDelayMs = this.retryInitialMs;
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
      // While the kernel is unreachable the background retries pace the fetches, and a
      // lookup waits at most one retry delay (not the cooldown) for the next one.
      const wait =
        this.nextRetryAt !== undefined
          ? Math.max(0, this.nextRetryAt - this.now())
          : this.lastFetchAt === undefined
            ? 0
            : Math.max(0, this.cooldownMs - (this.now() - this.lastFetchAt));
      this.startFetch(wait);
    }
    await this.inFlight;
    const key = this.keys.get(kid);
    if (key) return key;
    if (this.lastFetchError !== undefined) {
      throw refuse(Reasons.SIGNING_KEYS_UNAVAILABLE, `the kernel's signing keys could not be fetched: ${this.lastFetchError}`);
    }
    return undefined;
  }

  /**
   * Fetches now (or shares the fetch in flight), and keeps retrying in the background while
   * it fails: the ledger learns the keys as soon as the kernel answers, before any write.
   */
  refresh(): Promise<void> {
    this.startFetch(0);
    return this.inFlight ?? Promise.resolve();
  }

  /** Stops background retries. */
  close(): void {
    this.closed = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    this.nextRetryAt = undefined;
  }

  private startFetch(waitMs: number): void {
    if (this.inFlight) return;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    this.nextRetryAt = undefined;
    this.inFlight = (waitMs > 0 ? this.sleep(waitMs) : Promise.resolve())
      .then(() => this.refetch())
      .finally(() => {
        this.inFlight = undefined;
        this.scheduleRetry();
      });
  }

  private scheduleRetry(): void {
    if (this.closed || this.lastFetchError === undefined || this.retryInitialMs === 0 || this.retryTimer) return;
    const delay = this.retryDelayMs;
    this.retryDelayMs = Math.min(this.retryMaxMs, this.retryDelayMs * 2);
    this.nextRetryAt = this.now() + delay;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.nextRetryAt = undefined;
      this.startFetch(0);
    }, delay);
    this.retryTimer.unref();
  }

  private async refetch(): Promise<void> {
    this.lastFetchAt = this.now();
    try {
      const json = await this.fetchJwksJson();
      // Replace, not merge: a key the kernel stopped publishing (retired past its grace
      // period) must stop verifying here too.
      this.keys = parseJwks(json);
      const recovered = this.lastFetchError !== undefined || this.neverFetched;
      this.neverFetched = false;
      this.lastFetchError = undefined;
      this.retryDelayMs = this.retryInitialMs;
      if (recovered) this.onRecovered?.();
    } catch (err) {
      // Keep the keys we had: the kernel being briefly unreachable must not stop the
      // ledger from verifying capabilities signed with keys it already knows.
      // The cause, not a bare "fetch failed": it is what the refused caller and the log need.
      this.lastFetchError = causeText(err);
      this.onFetchError?.(this.lastFetchError);
    }
  }
}

/**
 * One line saying why a fetch failed, with the causes it wraps: Node's fetch, for one,
 * says only "fetch failed" and keeps the reason (ECONNREFUSED, a TLS error) in `cause`.
 */
function causeText(err: unknown): string {
  const parts: string[] = [];
  let e: unknown = err;
  for (let depth = 0; e !== undefined && e !== null && depth < 4; depth++) {
    const text = e instanceof Error ? (e.message.split("\n")[0] ?? e.name) : String(e);
    if (text && !parts.some((p) => p.includes(text))) parts.push(text);
    e = e instanceof Error ? e.cause : undefined;
  }
  return parts.join(": ") || "fetch failed";
}
