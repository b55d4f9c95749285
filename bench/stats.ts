/**
 * Latency statistics over one measured run: every sample kept (runs are short), sorted
 * once, percentiles by nearest rank.
 */

/** Latency summary in milliseconds. */
export interface LatencySummary {
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
}

/** Nearest-rank percentile of an ascending array; NaN when empty. */
export function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))] as number;
}

/** Summarises latencies given in milliseconds. */
export function summarise(latenciesMs: ArrayLike<number>): LatencySummary {
  const sorted = Float64Array.from(latenciesMs).sort();
  let sum = 0;
  for (const v of sorted) sum += v;
  return {
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
    max: sorted.length ? (sorted[sorted.length - 1] as number) : Number.NaN,
    mean: sorted.length ? sum / sorted.length : Number.NaN,
  };
}

/** A growable list of latency samples in milliseconds. */
export class LatencyRecorder {
  private buf = new Float64Array(1 << 14);
  private n = 0;

  add(ms: number): void {
    if (this.n === this.buf.length) {
      const next = new Float64Array(this.buf.length * 2);
      next.set(this.buf);
      this.buf = next;
    }
    this.buf[this.n++] = ms;
  }

  addAll(values: ArrayLike<number>): void {
    for (let i = 0; i < values.length; i++) this.add(values[i] as number);
  }

  get count(): number {
    return this.n;
  }

  values(): Float64Array {
    return this.buf.subarray(0, this.n);
  }
}
