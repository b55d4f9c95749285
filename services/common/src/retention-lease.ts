/**
 * Who sweeps (ADR 0031): one replica at a time per retention task, decided by MongoDB's unique
 * `_id`, never by process memory. Time is cut into terms of `termMs`; a replica holds a task's
 * term by inserting the document `<task>@<term>`, and whoever inserts it first holds it. The
 * holder may sweep until a quarter term before the term ends, so a replica whose clock is ahead
 * by less than that cannot start the next term while the last holder still sweeps.
 *
 * Why inserts and not a conditional update of one lease document: FerretDB v1.24 does not
 * isolate updates (ADR 0004: two concurrent compare-and-sets on one document can both report
 * success), while its unique `_id` holds on every backend. A term document is never updated;
 * the last few are kept so a replica with a lagging clock cannot take an old term again, and
 * a replica that took a term finds out, by a newer one, that its clock lags, and gives it up.
 */
import type { Collection, Db } from "mongodb";
import { isDuplicateKey } from "./mongo";

interface TermDoc {
  _id: string;
  task: string;
  term: number;
  holder: string;
  taken_at: Date;
}

/** Terms kept per task: older ones are removed by the holder of a newer one. */
const KEPT_TERMS = 16;

export interface RetentionLeaseOptions {
  /** Length of one term (ms). */
  termMs: number;
  /** This replica's name in the term documents (host, pid, a random part). */
  holder: string;
  /** Clock, in milliseconds since the epoch. Default `Date.now`. */
  now?: () => number;
}

export class RetentionLeases {
  private readonly now: () => number;
  /** The term this replica holds, per task. */
  private readonly held = new Map<string, number>();

  private constructor(
    private readonly terms: Collection<TermDoc>,
    private readonly opts: RetentionLeaseOptions,
  ) {
    this.now = opts.now ?? Date.now;
  }

  /** Opens `retention_leases` (its index awaited: a failure stops the start). */
  static async open(db: Db, opts: RetentionLeaseOptions): Promise<RetentionLeases> {
    const terms = db.collection<TermDoc>("retention_leases");
    await terms.createIndex({ task: 1, term: 1 }, { name: "task_term" });
    return new RetentionLeases(terms, opts);
  }

  /**
   * Holds the current term of `task` for this replica, taking it if nobody has.
   * @returns the term and the time (ms since the epoch) until which this replica may sweep, or
   *   undefined when another replica holds the term (or it is too late in the term to start).
   */
  async hold(task: string): Promise<{ term: number; until: number } | undefined> {
    const { termMs } = this.opts;
    const now = this.now();
    const term = Math.floor(now / termMs);
    const until = (term + 1) * termMs - termMs / 4;
    if (now >= until) return undefined;
    if (this.held.get(task) === term) return { term, until };
    try {
      await this.terms.insertOne(
        { _id: `${task}@${term}`, task, term, holder: this.opts.holder, taken_at: new Date(now) },
        { writeConcern: { w: "majority" } },
      );
    } catch (err) {
      if (!isDuplicateKey(err)) throw err;
      // Ours when an earlier insert's answer was lost; anyone else's otherwise.
      const doc = await this.terms.findOne({ _id: `${task}@${term}` });
      if (doc?.holder !== this.opts.holder) return undefined;
    }
    // A newer term exists: this replica's clock lags behind the one that took it.
    if (await this.terms.findOne({ task, term: { $gt: term } }, { projection: { _id: 1 } })) return undefined;
    this.held.set(task, term);
    await this.terms.deleteMany({ task, term: { $lt: term - KEPT_TERMS } }).catch(() => undefined);
    return { term, until };
  }
}
