/**
 * Removes the pending copies of finished calls in batches, off the answer's path. A
 * copy is only an index of unfinished calls; the completion (or indeterminate state) is
 * already durable and decides, and a copy left behind is skipped and removed by the
 * listing. So CompleteCall answers after its one insert, and the deletes of many calls
 * share one `deleteMany` — one round trip per batch instead of one per call, and on
 * FerretDB/SQLite, where a delete rewrites the table, one rewrite per batch.
 */
export interface SweepTarget {
  /** Deletes the copies with these call ids. */
  deleteMany(ids: string[]): Promise<void>;
}

export interface SweeperOptions {
  /** Ids per delete. */
  batch: number;
  /** Longest a queued id waits, in milliseconds. */
  maxDelayMs: number;
  /** Told when a batch could not be deleted (the listing will remove those copies). */
  onError: (err: unknown, ids: number) => void;
}

export class PendingCopySweeper {
  private queued: string[] = [];
  private timer: NodeJS.Timeout | undefined;
  private inFlight = new Set<Promise<void>>();

  constructor(
    private readonly target: SweepTarget,
    private readonly opts: SweeperOptions,
  ) {}

  /** Queues a copy for removal. */
  remove(id: string): void {
    this.queued.push(id);
    if (this.queued.length >= this.opts.batch) this.flush();
    else this.timer ??= setTimeout(() => this.flush(), this.opts.maxDelayMs).unref();
  }

  /** Starts deleting what is queued. */
  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.queued.length === 0) return;
    const ids = this.queued;
    this.queued = [];
    const p = this.target.deleteMany(ids).catch((err: unknown) => this.opts.onError(err, ids.length));
    this.inFlight.add(p);
    void p.finally(() => this.inFlight.delete(p));
  }

  /** Deletes what is queued and waits for every delete started (before the connection closes). */
  async drain(): Promise<void> {
    this.flush();
    await Promise.all([...this.inFlight]);
  }
}
