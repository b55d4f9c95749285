/**
 * Bounds a label whose values come from callers (tool ids): the `limit` values seen most
 * often keep their own label, everything else is labelled `other`, so a flood of made-up
 * ids cannot grow the number of series.
 *
 * Volumes are counted with the Space-Saving algorithm over `limit × 4` candidates: a new id
 * that pushes out the least frequent candidate inherits its count as an error bound, and an
 * id is only promoted over an admitted one when its guaranteed count (count − error) is
 * larger. A stream of ids seen once each therefore never displaces a tool that is really
 * refused (or writing) often, and memory stays O(limit).
 */
export const OTHER_LABEL = "other";

interface Candidate {
  count: number;
  error: number;
}

export class TopLabels {
  private readonly admitted = new Map<string, number>();
  private readonly candidates = new Map<string, Candidate>();
  private readonly capacity: number;

  /**
   * @param limit how many values keep a label of their own (0: everything is `other`).
   * @param onEvict called with a value that lost its label, so its series can be removed.
   */
  constructor(
    readonly limit: number,
    private readonly onEvict: (value: string) => void = () => undefined,
  ) {
    this.capacity = Math.max(4 * limit, 16);
  }

  /** Counts one occurrence of `value` and returns the label to use for it. */
  label(value: string): string {
    const seen = this.admitted.get(value);
    if (seen !== undefined) {
      this.admitted.set(value, seen + 1);
      return value;
    }
    if (this.limit === 0) return OTHER_LABEL;
    if (this.admitted.size < this.limit) {
      this.admitted.set(value, 1 + (this.candidates.get(value)?.count ?? 0));
      this.candidates.delete(value);
      return value;
    }
    const c = this.countCandidate(value);
    const [weakest, weakestCount] = this.weakestAdmitted();
    if (c.count - c.error > weakestCount) {
      this.admitted.delete(weakest);
      this.candidates.delete(value);
      this.admitted.set(value, c.count - c.error);
      this.candidates.set(weakest, { count: weakestCount, error: 0 });
      this.onEvict(weakest);
      return value;
    }
    return OTHER_LABEL;
  }

  /** The values that currently have a label of their own. */
  labelled(): string[] {
    return [...this.admitted.keys()];
  }

  private countCandidate(value: string): Candidate {
    const known = this.candidates.get(value);
    if (known) {
      known.count += 1;
      return known;
    }
    let entry: Candidate = { count: 1, error: 0 };
    if (this.candidates.size >= this.capacity) {
      let minId = "";
      let min = Infinity;
      for (const [id, cand] of this.candidates) {
        if (cand.count < min) {
          min = cand.count;
          minId = id;
        }
      }
      this.candidates.delete(minId);
      entry = { count: min + 1, error: min };
    }
    this.candidates.set(value, entry);
    return entry;
  }

  private weakestAdmitted(): [string, number] {
    let weakest = "";
    let min = Infinity;
    for (const [id, n] of this.admitted) {
      if (n < min) {
        min = n;
        weakest = id;
      }
    }
    return [weakest, min];
  }
}
