/**
 * The database side of settling begun calls (ADR 0034, call-settler.ts): the unsettled-second
 * marks (`unsettled_seconds`), the ledger's entries read a second at a time, and the
 * completions and pending copies the settler decides to write. Every read is an equality
 * (`lb`, `_id`) FerretDB pushes down; the marks are a handful of documents.
 */
import type { Collection } from "mongodb";
import { entryCompletes, idempotentEffectId } from "../../common/src/domain/call-completion";
import { isDuplicateKey } from "../../common/src/mongo";
import type { InsertBatcher } from "../../common/src/insert-batcher";
import type { Logger } from "../../common/src/logger";
import type { CallRecord } from "./call-record";
import type { EntryRef, SettleStore } from "./call-settler";
import { byId } from "./reads-by-id";
import { fromStored, toStored, type StoredCall } from "./stored-call";

/** One replica's mark of a second whose calls it has not settled yet. */
export interface UnsettledMark {
  _id: string;
  /** The second (`YYYYMMDDHHmmss`, ADR 0033), as the calls' `lb`. */
  lb: string;
  /** The kernel replica (process) that marked it. */
  instance: string;
  at: Date;
}

export interface SettleStoreDeps {
  instance: string;
  marks: Collection<UnsettledMark>;
  calls: Collection<StoredCall>;
  entries: Collection<EntryRef>;
  copies: InsertBatcher<StoredCall>;
  /** Writes completions of calls from the entries that completed them (the journal's completion insert). */
  complete(done: ReadonlyArray<{ call: CallRecord; entry: EntryRef }>): Promise<void>;
  /** Whether the call has a completion document. */
  hasCompletion(callId: string): Promise<boolean>;
  logger: Logger;
}

const MAJORITY = { writeConcern: { w: "majority" as const } };

export class MongoSettleStore implements SettleStore {
  constructor(private readonly d: SettleStoreDeps) {}

  private markId(second: string, generation: number): string {
    return `${this.d.instance}/${second}/${generation}`;
  }

  async openSecond(second: string, generation: number): Promise<void> {
    try {
      await this.d.marks.insertOne({ _id: this.markId(second, generation), lb: second, instance: this.d.instance, at: new Date() }, MAJORITY);
    } catch (err) {
      if (!isDuplicateKey(err)) throw err;
    }
  }

  async closeSecond(second: string, generation: number): Promise<void> {
    await this.d.marks.deleteOne({ _id: this.markId(second, generation) }, MAJORITY);
  }

  entriesOf(second: string): Promise<EntryRef[]> {
    return this.d.entries.find({ lb: second }, { projection: { _id: 1, call_id: 1, recorded_at: 1 } }).toArray();
  }

  completeFromEntries(done: ReadonlyArray<{ call: CallRecord; entry: EntryRef }>): Promise<void> {
    return this.d.complete(done);
  }

  async copyPending(calls: readonly CallRecord[]): Promise<void> {
    const results = await Promise.allSettled(calls.map((c) => this.d.copies.insert(toStored(c))));
    for (const r of results) if (r.status === "rejected" && !isDuplicateKey(r.reason)) throw r.reason;
  }

  async staleMarks(before: Date): Promise<Array<{ id: string; second: string }>> {
    const marks = await this.d.marks.find({ instance: { $ne: this.d.instance } }).toArray();
    return marks.filter((m) => m.at < before).map((m) => ({ id: m._id, second: m.lb }));
  }

  /** Every pending call of the second: completed from its entry, else given a pending copy; then the mark goes. */
  async settleFromDatabase(second: string, markId: string): Promise<void> {
    const open = await this.openCallsOf(second);
    const done: Array<{ call: CallRecord; entry: EntryRef }> = [];
    const rest: CallRecord[] = [];
    for (const { call, entry } of open) entry ? done.push({ call, entry }) : rest.push(call);
    if (done.length > 0) await this.d.complete(done);
    if (rest.length > 0) await this.copyPending(rest);
    await this.d.marks.deleteOne({ _id: markId }, MAJORITY);
  }

  /** The seconds some replica has marked unsettled. */
  async markedSeconds(): Promise<string[]> {
    const marks = await this.d.marks.find({}, { projection: { lb: 1 } }).toArray();
    return [...new Set(marks.map((m) => m.lb))].sort();
  }

  /**
   * The calls of one second that are still open by the journal: pending, no completion
   * document, still journaled after that read (retention at work); with the entry that
   * completes each, if the ledger holds it.
   */
  async openCallsOf(second: string, toolFilter?: (toolId: string) => boolean): Promise<Array<{ call: CallRecord; entry?: EntryRef }>> {
    const calls = (await this.d.calls.find({ lb: second }).toArray())
      .map(fromStored)
      .filter((c) => c.state === "pending" && (!toolFilter || toolFilter(c.tool_id)));
    // A second at load holds thousands of calls: their reads by `_id` go a bounded number at once.
    const byCallId = new Map(calls.map((c) => [c._id, c]));
    const open = await byId([...byCallId.keys()], async (id) => {
      if (await this.d.hasCompletion(id)) return undefined;
      const call = byCallId.get(id)!;
      const entry = await this.completingEntry(call);
      if (entry) return { call, entry };
      // Retention removes a completed call's journal document before its completion: one gone
      // now was completed and swept between the reads above, not left open.
      return (await this.d.calls.findOne({ _id: id }, { projection: { _id: 1 } })) ? { call } : undefined;
    });
    return [...open.values()];
  }

  /** Whether a pending journaled call is still open: no completion document, no entry that completes it. */
  async isOpen(call: CallRecord): Promise<boolean> {
    return !(await this.d.hasCompletion(call._id)) && (await this.completingEntry(call)) === undefined;
  }

  /** The ledger's entry that completes this call (ADR 0034), if any: one read by `_id`. */
  async completingEntry(call: CallRecord): Promise<EntryRef | undefined> {
    if (call.effect !== "idempotent" || call.key === undefined || call.mode !== undefined) return undefined;
    const entry = await this.d.entries.findOne({ _id: idempotentEffectId(call.key) }, { projection: { _id: 1, call_id: 1, recorded_at: 1 } });
    return entry && entryCompletes(call, entry) ? entry : undefined;
  }
}
