/**
 * Enforces the retention policy (docs/retention.md, ADR 0031). FerretDB v1.24 refuses TTL
 * indexes, so each service sweeps what it owns: every interval, for each of its tasks whose
 * lease this replica holds (retention-lease.ts), a few bounded deletes of records past their
 * retention, selected by an indexed time field. It runs on a timer, never on an answer's path;
 * a failed sweep is logged and the next one tries again. Stats counters are never decremented:
 * they count what was written (ADR 0025), not what is still stored.
 */
import { hostname } from "node:os";
import { randomBytes } from "node:crypto";
import type { Collection, Db, Document, Filter } from "mongodb";
import type { Logger } from "./logger";
import type { Metrics } from "./metrics";
import { RetentionLeases } from "./retention-lease";

/** One kind of record to expire. */
export interface RetentionTask {
  /** Names the task's lease and its metric label (replicas with the same task share the lease). */
  name: string;
  /** Removes at most `limit` records past their retention; returns how many it removed. */
  sweep(limit: number): Promise<number>;
}

export interface RetentionSweeperOptions {
  /** How often a sweep runs (ms); a term of the lease is two intervals. */
  intervalMs: number;
  /** Most records one delete removes. */
  batch: number;
  /** The service that sweeps, for logs and metrics ("kernel", "ledger", ...). */
  service: string;
  logger: Logger;
  metrics?: Metrics | undefined;
  /** This replica's name in the lease (default host, pid and a random part). */
  holder?: string;
  now?: () => number;
}

/** How long a stop waits for a sweep in progress (ms). */
const STOP_PATIENCE_MS = 1_000;

/** Deletes per task per sweep at most: a backlog is worked off over several sweeps. */
const MAX_BATCHES_PER_SWEEP = 10;

export class RetentionSweeper {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<Record<string, number>> | undefined;
  /** Set by stop: a sweep in progress ends after its current delete. */
  private stopping = false;
  private readonly now: () => number;

  private constructor(
    private readonly leases: RetentionLeases,
    private readonly tasks: readonly RetentionTask[],
    private readonly opts: RetentionSweeperOptions,
  ) {
    this.now = opts.now ?? Date.now;
  }

  /** Opens the lease collection; tasks are swept once {@link start}ed (or by {@link sweepOnce}). */
  static async open(db: Db, tasks: readonly RetentionTask[], opts: RetentionSweeperOptions): Promise<RetentionSweeper> {
    const holder = opts.holder ?? `${hostname()}/${process.pid}/${randomBytes(4).toString("hex")}`;
    const leases = await RetentionLeases.open(db, { termMs: 2 * Math.max(opts.intervalMs, 1), holder, ...(opts.now ? { now: opts.now } : {}) });
    return new RetentionSweeper(leases, tasks, opts);
  }

  /** Sweeps every interval until {@link stop}; an interval of 0 (or no task) never sweeps. */
  start(): this {
    if (this.opts.intervalMs > 0 && this.tasks.length > 0) {
      this.timer = setInterval(() => void this.sweepOnce(), this.opts.intervalMs);
      this.timer.unref();
    }
    return this;
  }

  /**
   * Stops the timer and waits for a sweep in progress to finish its current delete (before the
   * database connection closes), for at most a second: with the database gone a delete could
   * wait out the driver's timeouts, and a sweep left behind is harmless (its deletes are
   * idempotent; the next sweep, anywhere, picks up).
   */
  async stop(): Promise<void> {
    this.stopping = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    let patience: NodeJS.Timeout | undefined;
    const giveUp = new Promise<void>((resolve) => (patience = setTimeout(resolve, STOP_PATIENCE_MS).unref()));
    await Promise.race([this.running?.then(() => undefined), giveUp]);
    clearTimeout(patience);
  }

  /**
   * One sweep: each task whose lease this replica holds removes up to a few batches.
   * @returns how many records each task removed (tasks held by another replica are absent).
   */
  sweepOnce(): Promise<Record<string, number>> {
    this.running ??= this.sweepTasks().finally(() => (this.running = undefined));
    return this.running;
  }

  private async sweepTasks(): Promise<Record<string, number>> {
    const removed: Record<string, number> = {};
    for (const task of this.tasks) {
      if (this.stopping) break;
      try {
        const held = await this.leases.hold(task.name);
        if (held === undefined) continue;
        removed[task.name] = await this.sweepTask(task, held);
      } catch (err) {
        this.opts.logger.warn({ err, task: task.name }, "retention: a sweep failed; the next one retries");
      }
    }
    return removed;
  }

  private async sweepTask(task: RetentionTask, { term, until }: { term: number; until: number }): Promise<number> {
    const { batch, service, logger, metrics } = this.opts;
    let total = 0;
    for (let i = 0; i < MAX_BATCHES_PER_SWEEP && this.now() < until && !this.stopping; i++) {
      const n = await task.sweep(batch);
      total += n;
      if (n > 0) metrics?.retentionSwept(service, task.name, n);
      if (n < batch) break;
    }
    logger.debug({ task: task.name, removed: total, term }, "retention: swept");
    return total;
  }
}

/**
 * Deletes at most `limit` documents matching `filter`: their ids are read first (with a limit,
 * which MongoDB has no delete for), then deleted by id under the same filter, so a document
 * that changed in between is kept.
 */
export async function deleteBatch<D extends Document & { _id: string }>(coll: Collection<D>, filter: Filter<D>, limit: number): Promise<number> {
  const ids = (
    await coll
      .find(filter, { projection: { _id: 1 } })
      .limit(limit)
      .toArray()
  ).map((d) => d._id);
  if (ids.length === 0) return 0;
  const res = await coll.deleteMany({ $and: [filter, { _id: { $in: ids } }] } as Filter<D>, { writeConcern: { w: "majority" } });
  return res.deletedCount;
}

/** A cutoff `seconds` before now, or undefined when 0 keeps records forever. */
export function cutoff(seconds: number, now: number = Date.now()): Date | undefined {
  return seconds > 0 ? new Date(now - seconds * 1000) : undefined;
}
