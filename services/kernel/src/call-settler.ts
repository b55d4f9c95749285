/**
 * The background half of a two-write call (ADR 0034). BeginCall journals a call in one insert
 * and nothing else; this replica remembers the calls it began, second by second, until each is
 * settled: completed by the ledger's entry (read a second at a time, one read however many
 * calls), completed here by CompleteCall, or — after `settleAfterMs` still open — given a
 * pending copy so the listings find it. A second is marked unsettled in the database before
 * its first call is journaled and unmarked once all its calls are settled, so a killed
 * replica's open calls are found again (`adoptStale`, by any replica). A client that forwards
 * the ledger's completion receipt (ADR 0035) settles its call without any read: the entries
 * are read only for the calls whose receipt has not come within `RECEIPT_WAIT_MS`. No
 * database types here: the store does the reading and writing.
 */
import { bucketStart, secondBucket } from "../../common/src/domain/time-buckets";
import { entryCompletes, idempotentEffectId } from "../../common/src/domain/call-completion";
import { receiptHolds, type CompletionReceipt } from "../../common/src/domain/completion-receipt";
import type { Logger } from "../../common/src/logger";
import type { CallRecord } from "./call-record";

/** An entry as the settler reads it: enough to match it to a call. */
export interface EntryRef {
  _id: string;
  call_id: string;
  recorded_at: Date;
}

/** What the settler needs of the database. */
export interface SettleStore {
  /** Marks `second` unsettled for this replica; `generation` tells a second marked again after its settling apart. */
  openSecond(second: string, generation: number): Promise<void>;
  /** Removes that mark. */
  closeSecond(second: string, generation: number): Promise<void>;
  /** The ledger's entries of one second. */
  entriesOf(second: string): Promise<EntryRef[]>;
  /** The entry that completes this call, if the ledger holds it (one read by `_id`). */
  completingEntry(call: CallRecord): Promise<EntryRef | undefined>;
  /** Writes the completion of each call from the entry that completed it (a duplicate is no error). */
  completeFromEntries(done: ReadonlyArray<{ call: CallRecord; entry: EntryRef }>): Promise<void>;
  /** Writes a pending copy of each call (a duplicate is no error). */
  copyPending(calls: readonly CallRecord[]): Promise<void>;
  /** Other replicas' marks older than `before`: seconds they stopped settling. */
  staleMarks(before: Date): Promise<Array<{ id: string; second: string }>>;
  /** Settles one second from the database alone (every call of it), then removes the mark `id`. */
  settleFromDatabase(second: string, markId: string): Promise<void>;
}

export interface SettlerOptions {
  /** How long a call may stay open before it gets a pending copy (ms). */
  settleAfterMs?: number;
  /** A mark this much older than its second is another replica's that died (ms). */
  staleAfterMs?: number;
  tickMs?: number;
  /** Open calls kept in memory; beyond, BeginCall writes the pending copy itself. */
  maxCalls?: number;
  /** The same bound on the bytes of their recorded arguments. */
  maxArgumentBytes?: number;
  /** Entries seconds read by one tick at most (a replica catching up reads the rest next tick). */
  maxSecondsPerTick?: number;
}

/**
 * Up to this many open calls, each is looked up by its entry's `_id` instead of reading whole
 * seconds of entries: a read by `_id` costs the same on every backend, a second's entries are
 * read by `lb`, which FerretDB on SQLite answers by scanning the collection.
 */
const LOOKUPS_UP_TO = 8;
/** How long after a second ends its entries are read: writes of that second still landing. */
const ENTRIES_GRACE_MS = 300;
const ADOPT_EVERY_MS = 2_000;
/**
 * How long a call may wait for its receipt before its entry is read: a client forwards it
 * with its next BeginCalls, milliseconds after the write at load. Past it (an older or
 * another language's client, a client's last calls) the entries are read as before.
 */
const RECEIPT_WAIT_MS = 1_000;
/** The longest a stop spends settling the open calls. */
const CLOSE_WITHIN_MS = 2_000;

interface OpenSecond {
  calls: Map<string, CallRecord>;
  /** BeginCalls of this second between their mark and their journal write. */
  inFlight: number;
  /** The mark of the calls admitted since the second was last settled, and its generation. */
  mark?: Promise<void>;
  generation: number;
}

export class CallSettler {
  private readonly open = new Map<string, OpenSecond>();
  /** Which open second each open call is in. */
  private readonly where = new Map<string, string>();
  /** Calls an entry completed whose completion is not written yet (retried every tick). */
  private readonly matched = new Map<string, { call: CallRecord; entry: EntryRef }>();
  private bytes = 0;
  /** The newest second whose entries were read. */
  private readUpTo = "";
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private lastAdopt = 0;
  private readonly settleAfterMs: number;
  private readonly staleAfterMs: number;
  private readonly maxCalls: number;
  private readonly maxBytes: number;
  private readonly maxSecondsPerTick: number;
  private readonly receiptWaitMs: number;

  constructor(
    private readonly store: SettleStore,
    private readonly logger: Logger,
    private readonly opts: SettlerOptions = {},
  ) {
    this.settleAfterMs = opts.settleAfterMs ?? 5_000;
    this.staleAfterMs = opts.staleAfterMs ?? this.settleAfterMs + 30_000;
    this.maxCalls = opts.maxCalls ?? 50_000;
    this.maxBytes = opts.maxArgumentBytes ?? 64 * 1024 * 1024;
    this.maxSecondsPerTick = opts.maxSecondsPerTick ?? 30;
    // Never as long as the settle time itself: a call is read before it would get a copy.
    this.receiptWaitMs = Math.min(RECEIPT_WAIT_MS, this.settleAfterMs / 2);
  }

  start(): void {
    this.timer ??= setInterval(() => void this.tick(), this.opts.tickMs ?? 250).unref();
  }

  /**
   * Before a call's journal write: its second is marked unsettled (once per second), and the
   * call counted in flight so the second is not settled under it. @returns undefined when the
   * replica holds as many open calls as it may: the caller journals the old way (copy first).
   */
  async admit(call: CallRecord): Promise<((journaled: boolean) => void) | undefined> {
    const size = call.arguments_json.length;
    if (this.where.size >= this.maxCalls || this.bytes + size > this.maxBytes) return undefined;
    const second = call.lb ?? secondBucket(call.created_at);
    let s = this.open.get(second);
    if (!s) {
      s = { calls: new Map(), inFlight: 0, generation: 0 };
      this.open.set(second, s);
    }
    const entry = s;
    entry.inFlight++;
    try {
      entry.mark ??= this.store.openSecond(second, entry.generation).catch((err: unknown) => {
        entry.mark = undefined; // the next BeginCall of this second tries again
        throw err;
      });
      await entry.mark;
    } catch (err) {
      entry.inFlight--;
      throw err;
    }
    let done = false;
    return (journaled) => {
      if (done) return;
      done = true;
      entry.inFlight--;
      if (!journaled) return;
      // Held already (an earlier BeginCall of it, in this second or another): this one holds it now.
      if (this.where.has(call._id)) this.settled(call._id);
      entry.calls.set(call._id, call);
      this.where.set(call._id, second);
      this.bytes += size;
    };
  }

  /**
   * The call was completed or made indeterminate here: nothing left to settle.
   * @returns true when it was still open here (so it has no pending copy to remove).
   */
  settled(callId: string): boolean {
    const second = this.where.get(callId);
    if (second === undefined) return false;
    const call = this.open.get(second)?.calls.get(callId);
    this.open.get(second)?.calls.delete(callId);
    this.where.delete(callId);
    this.matched.delete(callId);
    if (call) this.bytes -= call.arguments_json.length;
    return true;
  }

  /**
   * A client forwarded the ledger's receipt for a call (ADR 0035): when this replica holds
   * the call open and the receipt is the one the ledger issued for this call's entry, the
   * call is settled on the next pass from the receipt, without reading the entry.
   * @returns "settles", "unknown" (not open here: settled already, or begun elsewhere), or
   * "invalid" (not issued under `secret` for this call's entry).
   */
  receipt(r: CompletionReceipt, secret: Uint8Array): "settles" | "unknown" | "invalid" {
    const call = this.openCall(r.callId);
    if (!call) return "unknown";
    if (call.key === undefined || !receiptHolds(secret, call.key, r)) return "invalid";
    const entry: EntryRef = { _id: idempotentEffectId(call.key), call_id: r.callId, recorded_at: new Date(r.recordedAtMs) };
    if (!entryCompletes(call, entry)) return "invalid";
    this.matched.set(call._id, { call, entry });
    return "settles";
  }

  /** The call this replica holds open under `callId`, if any. */
  private openCall(callId: string): CallRecord | undefined {
    const second = this.where.get(callId);
    return second === undefined ? undefined : this.open.get(second)?.calls.get(callId);
  }

  /** Whether this replica holds the call open (begun here, not settled yet). */
  isOpen(callId: string): boolean {
    return this.where.has(callId);
  }

  /** A recovery moved the call to its next attempt: a copy written later carries it. */
  updated(call: CallRecord): void {
    const second = this.where.get(call._id);
    if (second !== undefined) this.open.get(second)?.calls.set(call._id, call);
  }

  /** Whether this replica still holds the call open (for tests and the gauge). */
  get openCalls(): number {
    return this.where.size;
  }

  /** One pass; passes never overlap. Exposed for tests. */
  tick(now = Date.now()): Promise<void> {
    this.running ??= this.pass(now).finally(() => (this.running = undefined));
    return this.running;
  }

  /**
   * Stops, settling what it can now: every open call is completed from the entries read so far
   * or given a pending copy, and its second unmarked. What fails here is left marked: adopted.
   */
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
    // Bounded: a stop never waits on a slow database; what is left stays marked and is adopted.
    let timer: NodeJS.Timeout | undefined;
    const limit = new Promise<void>((resolve) => (timer = setTimeout(resolve, CLOSE_WITHIN_MS)));
    await Promise.race([
      this.pass(Date.now(), { final: true }).catch((err: unknown) =>
        this.logger.warn({ err }, "could not settle the open calls at stop; another replica adopts their seconds"),
      ),
      limit,
    ]);
    clearTimeout(timer);
  }

  private async pass(now: number, o: { final?: boolean } = {}): Promise<void> {
    try {
      await this.readEntries(now, o.final === true);
      await this.writeMatched();
      await this.settleDue(now, o.final === true);
      if (!o.final && now - this.lastAdopt >= ADOPT_EVERY_MS) {
        this.lastAdopt = now;
        await this.adoptStale(new Date(now - this.staleAfterMs));
      }
    } catch (err) {
      this.logger.warn({ err }, "settling begun calls failed; retrying on the next pass");
    }
  }

  /**
   * Reads the entries the open calls without a receipt need: each second that has ended since
   * the last read, from one before the oldest such call's second. Seconds skipped are those
   * only calls settled by their receipts needed (a call waiting for its receipt is younger than
   * any skipped second by more than a second: its entry cannot be in one).
   */
  private async readEntries(now: number, final: boolean): Promise<void> {
    const waiting = this.unreceipted(now, final);
    if (waiting.due.length === 0) return;
    if (waiting.due.length <= LOOKUPS_UP_TO) return this.lookUpEntries(waiting.due, waiting.youngest, now, final);
    const oldest = waiting.due.reduce((a, c) => (a < secondOf(c) ? a : secondOf(c)), secondOf(waiting.due[0]!));
    // One second before the oldest open call's: a ledger's clock a little behind this one.
    let next = bucketStart(oldest).getTime() - 1_000;
    if (this.readUpTo) next = Math.max(next, bucketStart(this.readUpTo).getTime() + 1_000);
    const last = final ? now : now - 1_000 - ENTRIES_GRACE_MS;
    for (let n = 0; next <= last && n < this.maxSecondsPerTick; next += 1_000, n++) {
      const second = secondBucket(new Date(next));
      for (const entry of await this.store.entriesOf(second)) {
        const call = this.openCall(entry.call_id);
        if (call && entryCompletes(call, entry)) this.matched.set(call._id, { call, entry });
      }
      if (!final || next <= now - 1_000 - ENTRIES_GRACE_MS) this.readUpTo = second;
    }
  }

  /**
   * The open calls no entry or receipt settled yet: `due` waited for their receipt long enough
   * (all of them at the final pass); `youngest`, the oldest second of those still waiting.
   */
  private unreceipted(now: number, final: boolean): { due: CallRecord[]; youngest: string | undefined } {
    const due: CallRecord[] = [];
    let youngest: string | undefined;
    for (const [second, s] of this.open) {
      for (const call of s.calls.values()) {
        if (this.matched.has(call._id)) continue;
        if (final || now - call.created_at.getTime() >= this.receiptWaitMs) due.push(call);
        else if (youngest === undefined || second < youngest) youngest = second;
      }
    }
    return { due, youngest };
  }

  /** Few calls to settle: each one whose second has ended is looked up by its entry's `_id`. */
  private async lookUpEntries(due: readonly CallRecord[], youngest: string | undefined, now: number, final: boolean): Promise<void> {
    const ended = secondBucket(new Date(now - 1_000 - ENTRIES_GRACE_MS));
    for (const call of due) {
      if ((!final && secondOf(call) > ended) || this.matched.has(call._id)) continue;
      const entry = await this.store.completingEntry(call);
      if (entry) this.matched.set(call._id, { call, entry });
    }
    if (final) return;
    // The seconds before now are covered for the calls looked up; a switch to reading whole
    // seconds starts after them, but never past one a call still waiting for its receipt needs.
    const covered = youngest === undefined ? ended : minSecond(ended, secondBucket(new Date(bucketStart(youngest).getTime() - 2_000)));
    if (covered > this.readUpTo) this.readUpTo = covered;
  }

  private async writeMatched(): Promise<void> {
    if (this.matched.size === 0) return;
    const done = [...this.matched.values()];
    await this.store.completeFromEntries(done);
    for (const d of done) this.settled(d.call._id);
  }

  /** Seconds open longer than settleAfterMs whose entries were read: the rest get a pending copy, then the mark goes. */
  private async settleDue(now: number, final: boolean): Promise<void> {
    for (const [second, s] of [...this.open]) {
      const end = bucketStart(second).getTime() + 1_000;
      if (s.inFlight > 0 || (!final && now < end + this.settleAfterMs)) continue;
      // Not before the entries of the call's window were read (a database that did not answer).
      if (!final && s.calls.size > 0 && (this.readUpTo === "" || this.readUpTo < secondBucket(new Date(end + this.settleAfterMs - 2_000)))) continue;
      const rest = [...s.calls.values()];
      if (rest.length > 0) await this.store.copyPending(rest);
      for (const c of rest) this.settled(c._id);
      // A BeginCall of this second admitted meanwhile is settled on a later pass, under this mark.
      if (s.inFlight > 0 || s.calls.size > 0) continue;
      // A late BeginCall of this second (its record made long before its write) marks it again,
      // under the next generation, so this removal never unmarks it.
      const marked = s.mark;
      const generation = s.generation;
      s.mark = undefined;
      s.generation++;
      if (marked) await this.store.closeSecond(second, generation);
      if (s.inFlight === 0 && s.calls.size === 0 && s.mark === undefined) this.open.delete(second);
    }
  }

  /** Seconds another replica marked and stopped settling (it was killed): settled from the database. */
  private async adoptStale(before: Date): Promise<void> {
    for (const m of await this.store.staleMarks(before)) {
      await this.store.settleFromDatabase(m.second, m.id);
      this.logger.warn({ second: m.second, mark: m.id }, "settled the calls of a second another kernel replica left open");
    }
  }
}

function secondOf(call: CallRecord): string {
  return call.lb ?? secondBucket(call.created_at);
}

function minSecond(a: string, b: string): string {
  return a < b ? a : b;
}
