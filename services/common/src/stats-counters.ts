/**
 * Totals for GetStats, kept at write time instead of counted at read time (issue 32 item 2,
 * DESIGN §13; docs/decisions/0025-stats-from-counters.md).
 *
 * FerretDB v1.24 answers a count by reading every document (67 s at 303,744 entries), and
 * updates one document without isolation (100 concurrent `$inc` ended at 12), so neither a
 * count at read time nor one shared counter document can serve. Instead every writer (each
 * store in each process) owns one document in `stats_counters` and is its only writer: it
 * adds in memory and replaces its document with its running totals about once a second.
 * A read sums the documents, whose number grows with process starts, never with traffic.
 *
 * Bound: a process killed without a stop loses the counts of its last flush interval (the
 * effects themselves are not affected; the counters under-count by those).
 */
import { randomUUID } from "node:crypto";
import type { Collection, Db } from "mongodb";
import type { Logger } from "./logger";

export const STATS_COLLECTION = "stats_counters";

/** The plain totals every writer may add to. */
export type CounterName = "entries" | "duplicates" | "payload_mismatches" | "rejections";
const COUNTER_NAMES: readonly CounterName[] = ["entries", "duplicates", "payload_mismatches", "rejections"];

/** One count of a breakdown. */
export interface CountOf {
  k: string;
  n: number;
}

/**
 * One writer's document. Breakdowns are arrays of `{k, n}`, not objects (a tool id may hold
 * `.` or `$`) nor arrays of pairs (FerretDB v1 refuses nested arrays).
 */
export interface CounterDoc {
  /** `<kind>:<service>:<instance>`; the instance is random per process start. */
  _id: string;
  kind: string;
  service: string;
  pid: number;
  started_at: Date;
  updated_at: Date;
  counts: Partial<Record<CounterName, number>>;
  by_reason: CountOf[];
  by_tool: CountOf[];
}

/** The sum of every writer's document. */
export interface StatsTotals {
  counts: Record<CounterName, number>;
  byReason: Record<string, number>;
  byTool: Record<string, number>;
  /** The earliest start of a writer that counted: totals cover what was written since. */
  countedSince: Date | undefined;
  /** How many writer documents were summed (grows with process starts). */
  writers: number;
}

export interface StatsCountersOptions {
  /** What this writer counts ("entries", "refusals"), part of its id. */
  kind: string;
  /** The service it runs in ("ledger", "kernel", "sink:<name>"). */
  service: string;
  logger: Logger;
  /** How often pending counts are written (default 1000 ms). */
  flushIntervalMs?: number;
}

/** What a stop waits for the last flush before giving up (the database may be gone). */
const CLOSE_PATIENCE_MS = 1_000;

/** One writer's counters. */
export class StatsCounters {
  private readonly counts = new Map<CounterName, number>();
  private readonly byReason = new Map<string, number>();
  private readonly byTool = new Map<string, number>();
  private readonly id: string;
  private readonly startedAt = new Date();
  /** Bumped by every add; a flush that wrote an older version leaves the writer dirty. */
  private version = 0;
  private written = -1;
  private flushing: Promise<void> | undefined;
  private readonly timer: NodeJS.Timeout;
  private failing = false;

  constructor(
    private readonly coll: Collection<CounterDoc>,
    private readonly opts: StatsCountersOptions,
  ) {
    this.id = `${opts.kind}:${opts.service}:${randomUUID()}`;
    this.timer = setInterval(() => void this.flush(), opts.flushIntervalMs ?? 1000);
    this.timer.unref();
  }

  static open(db: Db, opts: StatsCountersOptions): StatsCounters {
    return new StatsCounters(db.collection<CounterDoc>(STATS_COLLECTION), opts);
  }

  add(name: CounterName, n = 1): void {
    this.counts.set(name, (this.counts.get(name) ?? 0) + n);
    this.version++;
  }

  /** A recorded refusal (or a summary standing for `n`), by reason and tool. */
  addRefusals(reason: string, toolId: string, n = 1): void {
    this.add("rejections", n);
    this.byReason.set(reason, (this.byReason.get(reason) ?? 0) + n);
    this.byTool.set(toolId, (this.byTool.get(toolId) ?? 0) + n);
  }

  /**
   * Writes the running totals now if anything changed (also runs on a timer). One write at a
   * time; a caller that finds one in flight waits for it and writes again if counts it holds
   * came in after that one started, so what was counted before the call is written after it.
   */
  async flush(): Promise<void> {
    while (this.version !== this.written) {
      this.flushing ??= this.write().finally(() => {
        this.flushing = undefined;
      });
      await this.flushing;
      // Failing: the next timer tick retries; a caller is not held in a loop.
      if (this.failing) return;
    }
  }

  /** Stops the timer and writes what is pending, waiting at most a second for the database. */
  async close(): Promise<void> {
    clearInterval(this.timer);
    let timer: NodeJS.Timeout | undefined;
    const patience = new Promise<void>((resolve) => (timer = setTimeout(resolve, CLOSE_PATIENCE_MS)));
    await Promise.race([this.flush(), patience]);
    clearTimeout(timer);
  }

  private async write(): Promise<void> {
    const version = this.version;
    if (version === this.written) return;
    const doc: CounterDoc = {
      _id: this.id,
      kind: this.opts.kind,
      service: this.opts.service,
      pid: process.pid,
      started_at: this.startedAt,
      updated_at: new Date(),
      counts: Object.fromEntries(this.counts),
      by_reason: [...this.byReason].map(([k, n]) => ({ k, n })),
      by_tool: [...this.byTool].map(([k, n]) => ({ k, n })),
    };
    try {
      // This process is the document's only writer, so a replace cannot lose another's counts.
      await this.coll.replaceOne({ _id: this.id }, doc, { upsert: true, writeConcern: { w: "majority" } });
      this.written = version;
      if (this.failing) this.opts.logger.info({ counters: this.id }, "stats counters written again");
      this.failing = false;
    } catch (err) {
      // Kept in memory and written by a later flush; logged once per outage.
      if (!this.failing) this.opts.logger.warn({ err: errorText(err), counters: this.id }, "stats counters not written; will retry");
      this.failing = true;
    }
  }
}

/**
 * The totals of every writer, read with a database-side time limit. Reads a document per
 * writer, never the collections the counters stand for.
 */
export async function readTotals(db: Db, maxTimeMS: number): Promise<StatsTotals> {
  const docs = await db.collection<CounterDoc>(STATS_COLLECTION).find({}, { maxTimeMS }).toArray();
  const out: StatsTotals = {
    counts: Object.fromEntries(COUNTER_NAMES.map((n) => [n, 0])) as Record<CounterName, number>,
    byReason: {},
    byTool: {},
    countedSince: undefined,
    writers: docs.length,
  };
  for (const d of docs) {
    for (const n of COUNTER_NAMES) out.counts[n] += d.counts?.[n] ?? 0;
    for (const { k, n } of d.by_reason ?? []) out.byReason[k] = (out.byReason[k] ?? 0) + n;
    for (const { k, n } of d.by_tool ?? []) out.byTool[k] = (out.byTool[k] ?? 0) + n;
    if (!out.countedSince || d.started_at < out.countedSince) out.countedSince = d.started_at;
  }
  return out;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message.split("\n")[0]! : String(err);
}
