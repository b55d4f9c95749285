/**
 * Repetitions (issue 11): every scenario runs `reps` times, interleaved (rep 1 of every
 * scenario at every level, then rep 2 ...), so drift on a shared machine (another tenant,
 * the database growing) lands on both sides of a ratio alike. A ratio is taken within each
 * repetition, against that repetition's own baseline; the report gives the median of the
 * per-repetition ratios with their range beside it, so one noisy repetition shows as a wide
 * range rather than as a different result.
 */

/** A ratio across repetitions: the median and the range of the per-repetition values. */
export interface SpreadRatio {
  /** Median of the per-repetition ratios. */
  median: number;
  min: number;
  max: number;
  /** How many repetitions had both sides. */
  reps: number;
}

/** Median of finite values (mean of the middle two for an even count); NaN when none. */
export function median(values: readonly number[]): number {
  const xs = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (xs.length === 0) return Number.NaN;
  const mid = xs.length >> 1;
  return xs.length % 2 === 1 ? xs[mid]! : (xs[mid - 1]! + xs[mid]!) / 2;
}

/** The spread of per-repetition ratios (non-finite ones, from a side that did not run, are left out). */
export function spreadOf(perRep: readonly number[]): SpreadRatio | undefined {
  const xs = perRep.filter(Number.isFinite);
  if (xs.length === 0) return undefined;
  return { median: median(xs), min: Math.min(...xs), max: Math.max(...xs), reps: xs.length };
}

/** "0.86 (0.70–1.23, 5 reps)"; just the value for one repetition. */
export function formatSpread(s: SpreadRatio | undefined, digits = 2): string {
  if (!s) return "–";
  if (s.reps < 2) return s.median.toFixed(digits);
  return `${s.median.toFixed(digits)} (${s.min.toFixed(digits)}–${s.max.toFixed(digits)})`;
}

/**
 * The interleaved order: each repetition visits every level, and at each level every
 * scenario in the given order.
 */
export function interleavedPlan<S>(
  reps: number,
  levels: readonly number[],
  scenariosAt: (level: number) => readonly S[],
): { rep: number; level: number; scenario: S }[] {
  const plan: { rep: number; level: number; scenario: S }[] = [];
  for (let rep = 0; rep < reps; rep++) for (const level of levels) for (const scenario of scenariosAt(level)) plan.push({ rep, level, scenario });
  return plan;
}
