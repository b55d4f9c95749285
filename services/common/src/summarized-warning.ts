/**
 * A warning that may come with every request (a misconfigured peer, a client from another
 * deployment): logged at once the first time, then at most once per interval with how many
 * came since, so one bad client cannot flood the log. The metrics count every one.
 */
import type { Logger } from "./logger";

export class SummarizedWarning {
  private pending = 0;
  private last = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly logger: Logger,
    private readonly message: string,
    private readonly everyMs = 60_000,
    private readonly now: () => number = Date.now,
  ) {}

  /** `n` more occurrences; logs them (with any held back) unless the last line was within the interval. */
  add(n: number): void {
    if (n <= 0) return;
    this.pending += n;
    const t = this.now();
    if (t - this.last < this.everyMs) return;
    this.logger.warn({ occurrences: this.pending, within_ms: Number.isFinite(this.last) ? t - this.last : 0 }, this.message);
    this.pending = 0;
    this.last = t;
  }
}
