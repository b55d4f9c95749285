import { randomUUID } from "node:crypto";
import type { Collection, Db, Document, Filter, IndexSpecification } from "mongodb";
import { createListingIndex, listingBucketOf, listNewestFirst, ListingMarks, sweepBucketsBefore, type Scope } from "../../common/src/bucketed-listing";
import { KeycapError } from "../../common/src/errors";
import { indexesOf, isDatabaseUnavailable, isDuplicateKey, isFerretDB } from "../../common/src/mongo";
import { afterKeyset } from "../../common/src/paging";
import { faultPoint } from "../../common/src/fault-points";
import { InsertBatcher } from "../../common/src/insert-batcher";
import type { Logger } from "../../common/src/logger";
import { BegunCalls } from "./begun-calls";
import { byId } from "./reads-by-id";
import { callOf, fromStored, toStored, type StoredCall } from "./stored-call";
import { PendingCopySweeper } from "./pending-copy-sweeper";
import type { CompletionReceipt } from "../../common/src/domain/completion-receipt";
import { loadReceiptKey } from "../../common/src/receipt-key";
import { CallSettler, type EntryRef, type SettlerOptions } from "./call-settler";
import { MongoSettleStore, type UnsettledMark } from "./settle-store";
import { CALL_COMPLETIONS, JOURNAL_CALLS, LEDGER_ENTRIES, UNSETTLED_SECONDS } from "../../common/src/shared-collections";
import { Reasons, refuse } from "../../common/src/refuse";
import type { CapabilityClaims } from "../../capability/src";
import { RESUMES_KEPT, type CallOutcomeName, type CallRecord, type CallResume, type CallStateName } from "./call-record";

export { RESUMES_KEPT, type CallOutcomeName, type CallRecord, type CallResume, type CallStateName } from "./call-record";

/** The one completion of a call (`_id` = call id): written once, never updated. */
interface CompletionDoc {
  _id: string;
  outcome: CallOutcomeName;
  outcome_detail: string;
  completed_at: Date;
  /** The principal that completed the call (CompleteCall, or the ResumeCall that found its effect); absent on older completions. */
  completed_by?: string;
  /** The second of `completed_at`, by which retention finds it (ADR 0033); absent on older completions. */
  lb?: string;
}

/** Completions in the listing marks: swept by bucket, never listed (ADR 0033). */
const COMPLETIONS = "call_completions";

/** An index only MongoDB reads with (a range or a sort); `name` when an earlier version named it. */
interface RangeIndex {
  key: Record<string, 1 | -1>;
  name?: string;
}

/**
 * The journal's reads in order on MongoDB: a run's calls (ADR 0028), an operator's search by
 * key or principal, newest first (SearchCalls, ADR 0032).
 */
const RANGE_INDEXES: readonly RangeIndex[] = [
  { key: { run_id: 1, created_at: 1, _id: 1 } },
  { key: { key: 1, created_at: -1, _id: -1 } },
  { key: { principal: 1, created_at: -1, _id: -1 } },
];

/**
 * Creates range indexes on MongoDB. FerretDB reads the same documents by equality alone (the
 * `eq_` indexes, the `lb` buckets) and sorts them in the service, so there they would cost every
 * insert (≈ 50 µs of a journal insert's ≈ 250 on FerretDB/PostgreSQL) and serve no read: not
 * created, and dropped where an earlier version created them.
 */
async function rangeIndexes<T extends Document>(coll: Collection<T>, indexes: readonly RangeIndex[], ferret: boolean): Promise<void> {
  if (!ferret) {
    for (const { key, name } of indexes) await coll.createIndex(key as IndexSpecification, name !== undefined ? { name } : {});
    return;
  }
  const existing = await indexesOf(coll);
  const same = (a: unknown, b: Record<string, number>): boolean => JSON.stringify(a) === JSON.stringify(b);
  for (const ix of existing) if (indexes.some(({ key }) => same(ix["key"], key))) await coll.dropIndex(String(ix["name"]));
}

/**
 * Completions by time: read only by retention's sweep of completions from before `lb` was kept,
 * a range (ADR 0031); the buckets serve every other read.
 */
const COMPLETION_RANGE_INDEXES: readonly RangeIndex[] = [{ key: { completed_at: 1 }, name: "completed_at" }];

/** The journal insert's batches (ADR 0020, amended 2026-12-06). */
export const JOURNAL_BATCHES = { inFlight: 2, maxDocs: 32 } as const;
const ALL: Scope[] = [{ scope: "all", value: "" }];

/** What SearchCalls finds calls by: one indexed field (ADR 0032). */
export type CallCriterion = { field: "_id" | "run_id" | "key" | "principal"; value: string };

const MAJORITY = { writeConcern: { w: "majority" as const } };

/** The collection's name in the listing marks (ADR 0033). */
const LISTED_AS = "calls";
/** A page's time limit when the journal was opened without one (tests; the services always set it). */
const UNLIMITED_PAGE_MS = 600_000;

/** What became of forwarded receipts: settling a call, naming none open here, or not verifying. */
export type ReceiptTally = Record<"settles" | "unknown" | "invalid", number>;

export interface JournalOptions {
  /** Removal of finished calls' pending copies: ids per delete (64) and longest wait in ms (100). */
  sweep?: { batch?: number; maxDelayMs?: number };
  /** Database-side time limit of the listings (KEYCAP_OPERATOR_QUERY_TIMEOUT_MS); none when unset. */
  listTimeMs?: number;
  /** Settling of begun calls (ADR 0034): when an open call gets its pending copy, memory bounds. */
  settle?: SettlerOptions;
}

/** Where a listing of calls continues: after this (created_at, _id). */
export interface JournalCursor {
  createdAt: number;
  id: string;
}

/** A page of calls; `next` is the cursor to continue after, if more may follow. */
export interface PendingPage {
  calls: CallRecord[];
  next?: JournalCursor;
}

/**
 * The kernel's durable call journal. A call is written (write concern
 * majority, result checked) before its capability is returned, so a crash
 * after BeginCall always leaves a pending call to recover.
 *
 * Three collections (docs/decisions/0007-call-journal-on-ferretdb.md):
 * `calls`, the journal, written once by BeginCall and only updated by
 * recovery; `call_completions`, one insert per call (`_id` = call id), whose
 * unique `_id` decides the one outcome on any backend; and `pending_calls`, a
 * copy of each call from BeginCall until it is completed or indeterminate.
 * On FerretDB (SQLite) an insert is the only operation whose cost does not
 * grow with the collection (reads by `_id` scan the table, updates and
 * deletes rewrite it): so the hot path inserts into the big collections and
 * reads and deletes only in `pending_calls`, which is as large as the number
 * of unfinished calls. Whether a call is completed is decided by
 * `call_completions` alone; a copy left in `pending_calls` by a crash is
 * skipped and removed.
 */
export class CallJournal {
  /** Calls begun here and not completed here yet: CompleteCall needs no read to find them. */
  private readonly begun = new BegunCalls({ maxCalls: 20_000, maxArgumentBytes: 16 * 1024 * 1024 });
  /** Pending copies of completed calls, deleted in batches after CompleteCall has answered. */
  private readonly sweeper: PendingCopySweeper;
  /** The hot path's inserts, each collection's concurrent ones sharing a command (group commit, ADR 0020). */
  private readonly copyInserts: InsertBatcher<StoredCall>;
  private readonly journalInserts: InsertBatcher<StoredCall>;
  private readonly completionInserts: InsertBatcher<CompletionDoc>;
  /** Completed calls whose leftover pending copy retention just removed: their removal waits until then (ms). */
  private readonly settling = new Map<string, number>();
  /** No completion without `lb` is past its retention any more (see expireCompleted). */
  private unbucketedGone = false;
  /** Calls begun here and not settled yet: completed by the ledger's entry, here, or given a copy (ADR 0034). */
  private readonly settler: CallSettler;
  private readonly settleStore: MongoSettleStore;

  private constructor(
    private readonly calls: Collection<StoredCall>,
    private readonly completions: Collection<CompletionDoc>,
    private readonly pending: Collection<StoredCall>,
    private readonly logger: Logger,
    private readonly marks: ListingMarks,
    unsettled: Collection<UnsettledMark>,
    entries: Collection<EntryRef>,
    sweep: JournalOptions["sweep"] = {},
    private readonly listTimeMs: number | undefined = undefined,
    settle: SettlerOptions = {},
    /** The completion receipts' key (ADR 0035), shared with the ledger through the database. */
    private readonly receiptKey: Uint8Array,
  ) {
    this.sweeper = new PendingCopySweeper(
      { deleteMany: async (ids) => void (await this.pending.deleteMany({ _id: { $in: ids } }, MAJORITY)) },
      {
        batch: sweep.batch ?? 64,
        maxDelayMs: sweep.maxDelayMs ?? 100,
        onError: (err, n) => this.logger.warn({ err, calls: n }, "could not remove the pending copies of finished calls; listing will skip and remove them"),
      },
    );
    const unacknowledged = (): Error => refuse(Reasons.JOURNAL_WRITE_UNACKNOWLEDGED, "the call journal did not acknowledge the write; retry");
    // Worst case 3 UTF-8 bytes per UTF-16 unit of the arguments, plus the rest of the record.
    const sizeOf = (c: StoredCall): number => 3 * c.arguments_json.length + 2048;
    this.copyInserts = new InsertBatcher(pending, { ...MAJORITY, sizeOf, unacknowledged });
    // Two commands of 32 at most: a burst of BeginCalls (64 clients in lockstep) is journaled in
    // two commands side by side, not one the next burst waits behind (bench/README, "What
    // limits the two-write call").
    this.journalInserts = new InsertBatcher(calls, { ...MAJORITY, sizeOf, unacknowledged, ...JOURNAL_BATCHES });
    this.completionInserts = new InsertBatcher(completions, { ...MAJORITY, sizeOf: (c) => 3 * c.outcome_detail.length + 256, unacknowledged });
    this.settleStore = new MongoSettleStore({
      instance: randomUUID(),
      marks: unsettled,
      calls,
      entries,
      copies: this.copyInserts,
      complete: (done) => this.completeFromEntries(done),
      hasCompletion: async (id) => (await this.completions.findOne({ _id: id }, { projection: { _id: 1 } })) !== null,
      logger,
    });
    this.settler = new CallSettler(this.settleStore, logger, settle);
    this.settler.start();
  }

  /** The options of an operator read: the database-side time limit (KEYCAP_OPERATOR_QUERY_TIMEOUT_MS), when set. */
  private operatorRead(): { maxTimeMS?: number } {
    return this.listTimeMs !== undefined ? { maxTimeMS: this.listTimeMs } : {};
  }

  /** Finishes the batched removals still queued (before the database connection closes). */
  async close(): Promise<void> {
    await this.settler.close();
    await this.sweeper.drain();
  }

  static async open(db: Db, logger: Logger, opts: JournalOptions = {}): Promise<CallJournal> {
    const calls = db.collection<StoredCall>(JOURNAL_CALLS);
    const completions = db.collection<CompletionDoc>(CALL_COMPLETIONS);
    const pending = db.collection<StoredCall>("pending_calls");
    // Awaited at start: a failure stops the start (no fire-and-forget indexes). One index per
    // command (see EntryStore.open).
    // `call_completions` is only read by `_id`; `calls` by `_id`, and by run for a run's
    // listing and a replay's matching (ADR 0028: an equality filter, then the run's order).
    const ferret = await isFerretDB(db);
    await rangeIndexes(calls, RANGE_INDEXES, ferret);
    // The same reads on FerretDB/PostgreSQL, which pushes down only top-level equality and
    // serves it from an `eq_` index's GIN twin (ADR 0033): a run's or a key's calls, the
    // indeterminate calls, and a principal's calls one second (`lb`) at a time.
    await calls.createIndex({ run_id: 1 }, { name: "eq_run_id" });
    await calls.createIndex({ key: 1 }, { name: "eq_key" });
    await calls.createIndex({ state: 1 }, { name: "eq_state" });
    await createListingIndex(calls);
    await pending.createIndex({ created_at: 1, _id: 1 });
    await pending.createIndex({ tool_id: 1, created_at: 1, _id: 1 });
    // Retention (ADR 0031) finds the completions from before `lb` by their time, a range.
    await rangeIndexes(completions, COMPLETION_RANGE_INDEXES, ferret);
    return new CallJournal(
      calls,
      completions,
      pending,
      logger,
      await ListingMarks.open(db),
      db.collection<UnsettledMark>(UNSETTLED_SECONDS),
      db.collection<EntryRef>(LEDGER_ENTRIES),
      opts.sweep,
      opts.listTimeMs,
      opts.settle,
      await loadReceiptKey(db),
    );
  }

  /**
   * Receipts a client forwarded (ADR 0035): each call this replica holds open whose receipt
   * verifies is settled from it on the settler's next pass, without reading its entry.
   */
  acceptReceipts(receipts: readonly CompletionReceipt[]): ReceiptTally {
    const tally: ReceiptTally = { settles: 0, unknown: 0, invalid: 0 };
    for (const r of receipts) tally[this.settler.receipt(r, this.receiptKey)]++;
    return tally;
  }

  /**
   * Journals a new call in one insert (write concern majority) before the caller may answer
   * (ADR 0034); its second is marked unsettled first, so a crash leaves it findable until the
   * settler has completed it from the ledger's entry or given it a pending copy. Past the
   * settler's bound, the copy first and the journal document second (a crash between leaves
   * a listed copy, which listPending and require() heal into the journal). The listing marks of
   * its principal's second (ADR 0033) come before the journal document too: a journaled call
   * is always found by principal.
   * When the call id exists: the same tool, run and arguments return the existing call
   * (existing = true); anything else is refused, never overwritten.
   */
  async begin(record: CallRecord): Promise<{ call: CallRecord; existing: boolean }> {
    record.lb = listingBucketOf(record.created_at);
    // One insert (ADR 0034): the second is marked unsettled first (once per second and
    // replica), so a crash before the call is settled leaves it findable; the settler
    // completes it from the ledger's entry or gives it a pending copy. A replica holding as
    // many open calls as it may journals the call the earlier way, copy first.
    const [admitted, marked] = await Promise.allSettled([this.settler.admit(record), this.markListings(record)]);
    if (admitted.status === "rejected" || marked.status === "rejected") {
      if (admitted.status === "fulfilled") admitted.value?.(false);
      throw admitted.status === "rejected" ? admitted.reason : (marked as PromiseRejectedResult).reason;
    }
    const settle = admitted.value;
    const copyInserted = settle ? false : await this.insertPendingCopy(record);
    faultPoint("journal.begin.before-journal");
    try {
      await this.journalInserts.insert(toStored(record));
      settle?.(true);
      faultPoint("journal.begin.after-journal");
      // A copy was already there: left by an earlier BeginCall of this id that crashed
      // before its journal write; the journal now says what the call is.
      if (!settle && !copyInserted) await this.pending.replaceOne({ _id: record._id }, toStored(record), MAJORITY);
      this.begun.remember(record);
      return { call: record, existing: false };
    } catch (err) {
      // A lost answer may hide an applied insert: the call is settled as journaled (a pending
      // copy of one that was not is healed into the journal by listPending and require(), as a
      // copy-first crash's is), never left where no listing finds it (torture 2026-12-06).
      settle?.(isDatabaseUnavailable(err));
      if (!isDuplicateKey(err)) throw err;
    }
    const existing = await this.get(record._id);
    if (!existing) throw refuse(Reasons.CONCURRENT_BEGIN, "the call changed during BeginCall; retry");
    // Journaled by an earlier BeginCall whose answer was lost, or by a replica since killed:
    // settled from here on, in its own second.
    if (existing.state === "pending" && !copyInserted) await this.keepOpen(existing);
    if (
      existing.tool_id !== record.tool_id ||
      existing.run_id !== record.run_id ||
      existing.arguments_json !== record.arguments_json ||
      // A call id names one call in one mode (ADR 0028): a live call is never answered as a replay's, nor the reverse.
      (existing.mode ?? "live") !== (record.mode ?? "live") ||
      (existing.replay_of_run_id ?? "") !== (record.replay_of_run_id ?? "")
    ) {
      // Take back the copy this BeginCall inserted (only it has this created_at).
      if (copyInserted) await this.pending.deleteOne({ _id: record._id, created_at: record.created_at }, MAJORITY);
      throw refuse(
        Reasons.CALL_ID_CONFLICT,
        `call ${record._id} was already begun with a different tool, run id, arguments or mode; a call id names one call`,
        {
          call_id: record._id,
        },
      );
    }
    if (existing.state !== "pending") {
      if (copyInserted) await this.unmarkPending(record._id);
    } else if (copyInserted) {
      // The existing call had lost its copy (journaled before this write order): list it again, as it is.
      await this.pending.replaceOne({ _id: record._id }, existing, MAJORITY);
    }
    return { call: existing, existing: true };
  }

  /**
   * Makes sure a pending call journaled earlier is settled (ADR 0034): held open here, in the
   * second it was journaled in, or — past this replica's bound — given its pending copy now.
   */
  private async keepOpen(call: CallRecord): Promise<void> {
    if (this.settler.isOpen(call._id)) return;
    const settle = await this.settler.admit(call);
    if (settle) settle(true);
    else await this.insertPendingCopy(call);
  }

  /** The call with its completion merged in, or undefined. Two reads by `_id`, in parallel. */
  async get(callId: string): Promise<CallRecord | undefined> {
    const [found, completion] = await Promise.all([this.calls.findOne({ _id: callId }), this.completions.findOne({ _id: callId })]);
    const call = callOf(found);
    if (!call) return undefined;
    return completion ? withCompletion(call, completion) : this.withEntry(call);
  }

  /**
   * A pending Idempotent call the ledger's entry already completes (ADR 0034), read as
   * completed before the settler has written its completion: one read by `_id`.
   */
  private async withEntry(call: CallRecord): Promise<CallRecord> {
    if (call.state !== "pending") return call;
    const entry = await this.settleStore.completingEntry(call);
    return entry ? withCompletion(call, completionFromEntry(call, entry)) : call;
  }

  /** Completions of calls their ledger entries completed (the settler's; a duplicate is no error). */
  private async completeFromEntries(done: ReadonlyArray<{ call: CallRecord; entry: EntryRef }>): Promise<void> {
    const docs = done.map(({ call, entry }) => completionFromEntry(call, entry));
    const seconds = new Map(docs.map((d) => [d.lb, d.completed_at]));
    for (const at of seconds.values()) await this.marks.ensure(COMPLETIONS, at, ALL);
    const results = await Promise.allSettled(docs.map((d) => this.completionInserts.insert(d)));
    for (const r of results) if (r.status === "rejected" && !isDuplicateKey(r.reason)) throw r.reason;
    for (const { call } of done) this.begun.forget(call._id);
  }

  /**
   * The call, or NOT_FOUND. A finished call's pending copy left by a crash is removed on
   * the way; a copy whose journal write a crash prevented is healed into the journal.
   */
  async require(callId: string): Promise<CallRecord> {
    let call = await this.get(callId);
    if (!call) {
      const copy = callOf(await this.pending.findOne({ _id: callId }));
      call = copy ? await this.heal(copy) : undefined;
      if (!call) throw notFound(callId);
    }
    if (call.state !== "pending") await this.unmarkPending(callId);
    return call;
  }

  /**
   * Completes a pending (or operator-resolved indeterminate) call. Completing
   * again with the same outcome is a no-op; with another outcome it is refused.
   * The completion is one insert keyed by the call id, so of concurrent
   * completions exactly one outcome wins.
   */
  async complete(
    callId: string,
    outcome: CallOutcomeName,
    detail: string,
    opts: { by?: string; mayComplete?: (call: CallRecord) => Promise<void> } = {},
  ): Promise<{ call: CallRecord; alreadyCompleted: boolean }> {
    // The call must exist before a completion can be recorded for its id: this replica
    // having begun it, its journal document (most calls have no pending copy, ADR 0034), or a
    // pending copy whose journal write a crash prevented proves it.
    const call = this.begun.get(callId) ?? callOf(await this.calls.findOne({ _id: callId })) ?? callOf(await this.pending.findOne({ _id: callId }));
    if (!call) throw notFound(callId);
    await opts.mayComplete?.(call);
    const completion: CompletionDoc = {
      _id: callId,
      outcome,
      outcome_detail: detail,
      completed_at: new Date(),
      ...(opts.by !== undefined ? { completed_by: opts.by } : {}),
    };
    completion.lb = listingBucketOf(completion.completed_at);
    try {
      // Its second's mark first (one insert per second and process), so retention finds it by bucket.
      await this.marks.ensure(COMPLETIONS, completion.completed_at, ALL);
      await this.completionInserts.insert(completion);
    } catch (err) {
      if (!isDuplicateKey(err)) throw err;
      const earlier = await this.completions.findOne({ _id: callId });
      if (!earlier) throw refuse(Reasons.CONCURRENT_COMPLETE, `call ${callId} changed during CompleteCall; retry`, { call_id: callId });
      this.begun.forget(callId);
      this.settler.settled(callId);
      this.sweeper.remove(callId); // heals a pending copy left by a crash after the first completion
      return sameOutcomeOrRefuse(withCompletion(call, earlier), outcome);
    }
    this.begun.forget(callId);
    // A call still open here was never copied: no copy to remove (ADR 0034).
    if (!this.settler.settled(callId)) this.sweeper.remove(callId);
    return { call: withCompletion(call, completion), alreadyCompleted: false };
  }

  /**
   * Moves a pending call to its next attempt with new capability claims.
   * Compare-and-set on the attempt number, so two concurrent recoveries cannot
   * both win (atomic on MongoDB; FerretDB does not isolate updates, see 0004);
   * a completion recorded meanwhile also makes it lose.
   */
  async advanceAttempt(call: CallRecord, claims: CapabilityClaims, by: string): Promise<CallRecord> {
    const now = new Date();
    const resume: CallResume = { attempt: claims.attempt, capability_id: claims.jti, at: now, by };
    const stored = await this.calls.findOneAndUpdate(
      { _id: call._id, state: "pending", attempt: call.attempt },
      {
        // A document from before ADR 0036 loses its claims object: the string replaces it.
        $set: { attempt: claims.attempt, capability_json: JSON.stringify(claims), updated_at: now },
        $unset: { capability: "" },
        $push: { resumes: { $each: [resume], $slice: -RESUMES_KEPT } },
      },
      { returnDocument: "after", ...MAJORITY },
    );
    const updated = callOf(stored);
    if (!updated || (await this.completions.findOne({ _id: call._id }))) {
      throw refuse(Reasons.CONCURRENT_RESUME, `call ${call._id} was resumed or completed concurrently; list it again`, { call_id: call._id });
    }
    // Keep the pending copy current (never re-created: a completion may have removed it).
    await this.pending.replaceOne({ _id: call._id }, toStored(updated), MAJORITY);
    this.begun.remember(updated);
    this.settler.updated(updated);
    return updated;
  }

  /** Marks a pending call indeterminate (Unsafe at recovery): an operator decides. It leaves the pending list. */
  async markIndeterminate(callId: string, reason: string, message: string, by: string): Promise<void> {
    const now = new Date();
    await this.calls.updateOne(
      { _id: callId, state: "pending" },
      { $set: { state: "indeterminate", updated_at: now, last_resume_refusal: { reason, message, at: now, by } } },
      MAJORITY,
    );
    faultPoint("journal.indeterminate.after-mark");
    this.settler.settled(callId);
    // A crash here leaves the copy; listPending skips and removes it (the journal decides).
    await this.unmarkPending(callId);
  }

  /** Records a refused recovery on the call, for operators. */
  async recordResumeRefusal(callId: string, reason: string, message: string, by: string): Promise<void> {
    const now = new Date();
    await this.calls.updateOne({ _id: callId }, { $set: { updated_at: now, last_resume_refusal: { reason, message, at: now, by } } }, MAJORITY);
  }

  /**
   * One call for an operator's reading (GetCall): the journal with its completion, else a
   * pending copy whose journal write a crash prevented (shown as it is; reading heals
   * nothing). Both reads by `_id`, stopped at the operator time limit.
   */
  async read(callId: string): Promise<CallRecord | undefined> {
    const limited = this.operatorRead();
    const [found, completion] = await Promise.all([this.calls.findOne({ _id: callId }, limited), this.completions.findOne({ _id: callId }, limited)]);
    const call = callOf(found);
    if (!call) return callOf(await this.pending.findOne({ _id: callId }, limited));
    return completion ? withCompletion(call, completion) : this.withEntry(call);
  }

  /**
   * Calls whose one indexed field equals the criterion, newest first, after the cursor;
   * `tools` (when given) keeps only those tools' calls. Stopped at the operator time limit.
   * Every read is an equality on an index, whatever the size of the journal: a call id, run
   * or key reads its matches (`_id`, `eq_run_id`, `eq_key`; sorted by the database, on
   * FerretDB in memory); a principal, who may have begun millions of calls, is read one
   * second at a time from its listing marks (ADR 0033); the page's completions by `_id`.
   */
  async search(criterion: CallCriterion, tools: readonly string[] | undefined, after: JournalCursor | undefined, limit: number): Promise<PendingPage> {
    // No tool visible: nothing to find (and no walk over a principal's seconds to find it).
    if (tools && tools.length === 0) return { calls: [] };
    const filter: Filter<StoredCall> = { [criterion.field]: criterion.value };
    // Not pushed down by FerretDB: applied to the equality read's matches.
    if (tools) filter.tool_id = { $in: [...tools] };
    const limited = this.operatorRead();
    let found: StoredCall[];
    if (criterion.field === "principal") {
      found = await listNewestFirst(this.marks, this.calls, {
        name: LISTED_AS,
        scope: { scope: "principal", value: criterion.value },
        timeField: "created_at",
        filter,
        after: after ? { at: new Date(after.createdAt), id: after.id } : undefined,
        limit: limit + 1,
        maxTimeMS: this.listTimeMs ?? UNLIMITED_PAGE_MS,
      });
    } else {
      if (after) filter.$or = afterKeyset<StoredCall>("created_at", new Date(after.createdAt), after.id, "newest-first");
      found = await this.calls
        .find(filter, limited)
        .sort({ created_at: -1, _id: -1 })
        .limit(limit + 1)
        .toArray();
    }
    const page = found.slice(0, limit).map(fromStored);
    const ids = page.map((c) => c._id);
    const done = await this.completionsOf(ids, limited);
    const last = page[page.length - 1];
    return {
      calls: page.map((c) => (done.has(c._id) ? withCompletion(c, done.get(c._id)!) : c)),
      ...(found.length > limit && last ? { next: { createdAt: last.created_at.getTime(), id: last._id } } : {}),
    };
  }

  /**
   * Pending calls oldest first, after the cursor: a page of at most `limit` pending
   * copies, each checked against the journal, which decides. A copy whose call has a
   * completion or is indeterminate (a crash between the journal write and the copy's
   * removal) is removed and skipped; a copy with no journal document (a crash inside
   * BeginCall) is healed into the journal and listed. `next` is set whenever more may
   * follow. One extra journal read per page: a recovery path, never the hot path.
   */
  async listPending(toolId: string | readonly string[], after: JournalCursor | undefined, limit: number): Promise<PendingPage> {
    const { page, completed, next } = await this.pageOf(this.pending, {}, toolId, after, limit);
    const ids = page.filter((c) => !completed.has(c._id)).map((c) => c._id);
    const journaled = await byId(ids, async (id) => callOf(await this.calls.findOne({ _id: id })));
    const calls: CallRecord[] = [];
    for (const copy of page) {
      if (completed.has(copy._id)) {
        await this.unmarkPending(copy._id);
        continue;
      }
      const call = journaled.get(copy._id) ?? (await this.heal(copy));
      if (!call) continue;
      if (call.state !== "pending") {
        await this.unmarkPending(copy._id);
        continue;
      }
      // A copy the settler wrote before the ledger's entry came (a slow tool): completed now.
      const entry = await this.settleStore.completingEntry(call);
      if (entry) {
        await this.completeFromEntries([{ call, entry }]);
        await this.unmarkPending(copy._id);
      } else {
        calls.push(call);
      }
    }
    return mergePages(calls, await this.openCalls(toolId, after), next.next, limit);
  }

  /**
   * Calls of the seconds some replica has not settled yet (ADR 0034): journaled, not completed,
   * with no pending copy yet. A handful of seconds, each read by `lb`; a recovery path.
   */
  private async openCalls(toolId: string | readonly string[], after: JournalCursor | undefined): Promise<CallRecord[]> {
    const wanted = typeof toolId !== "string" ? new Set(toolId) : undefined;
    const filter = (t: string): boolean => (wanted ? wanted.has(t) : toolId === "" || t === toolId);
    const out: CallRecord[] = [];
    for (const second of await this.settleStore.markedSeconds()) {
      for (const { call, entry } of await this.settleStore.openCallsOf(second, filter)) {
        if (entry) continue;
        if (after && !isAfter(call, after)) continue;
        out.push(call);
      }
    }
    return out;
  }

  /**
   * Calls recovery marked indeterminate and nobody has completed since, oldest first.
   * An operator's query, never on the hot path: an equality on `eq_state`, so it reads the
   * indeterminate calls (sorted in memory on FerretDB), not the journal.
   */
  async listIndeterminate(toolId: string | readonly string[], after: JournalCursor | undefined, limit: number): Promise<PendingPage> {
    const { page, completed, next } = await this.pageOf(this.calls, { state: "indeterminate" }, toolId, after, limit);
    return { calls: page.filter((c) => !completed.has(c._id)), ...next };
  }

  /**
   * One run's calls in journal order (created_at, then `_id`), from `skip` on, each with its
   * completion. A run is a handful to thousands of calls, read by an operator or a replay:
   * an equality filter on the run, sorted by the index.
   */
  async listRun(runId: string, skip: number, limit: number, opts: { operator?: boolean } = {}): Promise<CallRecord[]> {
    // An operator's listing is stopped at the operator time limit; a replay's match is not an operator read.
    const limited = opts.operator === true ? this.operatorRead() : {};
    const calls = (await this.calls.find({ run_id: runId }, limited).sort({ created_at: 1, _id: 1 }).skip(skip).limit(limit).toArray()).map(fromStored);
    const done = await this.completionsOf(calls.map((c) => c._id));
    return calls.map((c) => {
      const completion = done.get(c._id);
      return completion ? withCompletion(c, completion) : c;
    });
  }

  /**
   * How many calls are pending and indeterminate, for the metrics gauges (read at scrape
   * time). Pending counts the pending copies, which may include a finished call whose copy
   * the sweeper has not removed yet (a moment's overcount), and this replica's open calls. Indeterminate reads the
   * indeterminate calls by `eq_state` like {@link listIndeterminate}, and leaves out those an
   * operator has completed since (one read by `_id` each): both in proportion to the
   * unfinished calls, never to the journal.
   */
  async counts(): Promise<{ pending: number; indeterminate: number }> {
    const [pending, marked] = await Promise.all([
      this.pending.countDocuments({}),
      this.calls.find({ state: "indeterminate" }, { projection: { _id: 1 } }).toArray(),
    ]);
    const ids = marked.map((c) => c._id);
    const completed = await this.completionsOf(ids, { projection: { _id: 1 } });
    // Plus the calls open on this replica, not copied yet (ADR 0034); those an entry completed
    // leave within a settler pass or two.
    return { pending: pending + this.settler.openCalls, indeterminate: marked.length - completed.size };
  }

  /**
   * Retention (ADR 0031): removes up to `limit` calls completed before `before`, and their
   * completions. Only completed calls are found (by `call_completions.completed_at`): pending
   * and indeterminate calls have no completion and are never removed. A completed call whose
   * pending copy a crash left behind loses the copy first (the completion decides, as in
   * listPending) and the rest only a sweep later, after `settleMs`: a listing that read the copy
   * just before has long finished, so it cannot heal the call back into the journal. Otherwise
   * the journal document goes before the completion: a crash in between leaves a completed call
   * the next sweep finishes, never a pending one.
   */
  async expireCompleted(before: Date, limit: number, settleMs = 60_000): Promise<number> {
    const now = Date.now();
    for (const [id, until] of this.settling) if (until <= now) this.settling.delete(id);
    // By bucket (ADR 0033): whole seconds of completions before the cutoff, each read by equality.
    const removed = await sweepBucketsBefore(this.marks, this.completions, {
      name: COMPLETIONS,
      before,
      limit,
      scopes: () => ALL,
      fields: ["_id"],
      remove: async (_second, docs) => {
        const found = docs.map((d) => d._id).filter((id) => !this.settling.has(id));
        const n = await this.removeCompleted(found, now + settleMs);
        return { removed: n, cleared: n === docs.length };
      },
    });
    if (removed >= limit || this.unbucketedGone) return removed;
    // Completions from before `lb` by their time (FerretDB reads the whole collection for this), while any remain.
    const legacy = await this.expireCompletedByTime(before, limit - removed, now + settleMs);
    if (legacy === 0) this.unbucketedGone = true;
    return removed + legacy;
  }

  private async expireCompletedByTime(before: Date, limit: number, settleUntil: number): Promise<number> {
    const done = await this.completions
      .find({ lb: { $exists: false }, completed_at: { $lt: before }, _id: { $nin: [...this.settling.keys()] } }, { projection: { _id: 1 } })
      .limit(limit)
      .toArray();
    return this.removeCompleted(
      done.map((c) => c._id),
      settleUntil,
    );
  }

  /**
   * Removes these completed calls: a call with a leftover pending copy loses the copy now and
   * the rest after `settleUntil`; the others their journal document, then their completion, each
   * by `_id` (FerretDB pushes no `$in` down). @returns how many completed calls went.
   */
  private async removeCompleted(found: readonly string[], settleUntil: number): Promise<number> {
    if (found.length === 0) return 0;
    const copies = await this.copiesAmong(found);
    if (copies.size > 0) {
      await this.pending.deleteMany({ _id: { $in: [...copies] } }, MAJORITY);
      for (const id of copies) if (this.settling.size < 10_000) this.settling.set(id, settleUntil);
    }
    const ids = found.filter((id) => !copies.has(id));
    if (ids.length === 0) return 0;
    await byId(ids, async (id) => (await this.calls.deleteOne({ _id: id }, MAJORITY)).deletedCount || null);
    const gone = await byId(ids, async (id) => (await this.completions.deleteOne({ _id: id }, MAJORITY)).deletedCount || null);
    return gone.size;
  }

  /**
   * Which of these calls are still unfinished: a pending copy, open on this replica, or pending
   * in a second some replica has not settled yet (ADR 0034: not copied yet).
   */
  async pendingAmong(callIds: readonly string[]): Promise<Set<string>> {
    if (callIds.length === 0) return new Set();
    const out = await this.copiesAmong(callIds);
    for (const id of callIds) if (this.settler.isOpen(id)) out.add(id);
    const rest = callIds.filter((id) => !out.has(id));
    const marked = rest.length > 0 ? new Set(await this.settleStore.markedSeconds()) : new Set<string>();
    if (marked.size === 0) return out;
    const calls = await byId(rest, async (id) => callOf(await this.calls.findOne({ _id: id })));
    for (const call of calls.values()) {
      if (call.state !== "pending" || call.lb === undefined || !marked.has(call.lb)) continue;
      // The journal document is in hand: only its completion and entry are left to read.
      if (await this.settleStore.isOpen(call)) out.add(call._id);
    }
    return out;
  }

  /** Which of these calls have a pending copy. */
  private async copiesAmong(callIds: readonly string[]): Promise<Set<string>> {
    if (callIds.length === 0) return new Set();
    const found = await this.pending.find({ _id: { $in: [...callIds] } }, { projection: { _id: 1 } }).toArray();
    return new Set(found.map((c) => c._id));
  }

  /** One keyset page of `coll` (oldest first), with which of its calls have a completion. */
  private async pageOf(
    coll: Collection<StoredCall>,
    base: Filter<StoredCall>,
    toolId: string | readonly string[],
    after: JournalCursor | undefined,
    limit: number,
  ): Promise<{ page: CallRecord[]; completed: Set<string>; next: Pick<PendingPage, "next"> }> {
    const filter: Filter<StoredCall> = { ...base };
    // A list: the tools a runtime may see (possibly none).
    if (typeof toolId !== "string") filter.tool_id = { $in: [...toolId] };
    else if (toolId) filter.tool_id = toolId;
    if (after) filter.$or = afterKeyset<StoredCall>("created_at", new Date(after.createdAt), after.id, "oldest-first");
    // A listing over a large journal is stopped at its limit (OPERATOR_QUERY_TIMEOUT) rather than run on.
    const found = await coll
      .find(filter, this.operatorRead())
      .sort({ created_at: 1, _id: 1 })
      .limit(limit + 1)
      .toArray();
    const page = found.slice(0, limit).map(fromStored);
    const ids = page.map((c) => c._id);
    const completed = new Set((await this.completionsOf(ids, { projection: { _id: 1 } })).keys());
    const last = page[page.length - 1];
    return { page, completed, next: found.length > limit && last ? { next: { createdAt: last.created_at.getTime(), id: last._id } } : {} };
  }

  /**
   * The completions of these calls, one read by `_id` each (FerretDB pushes no `$in` down: it
   * would read the whole collection), a bounded number in flight.
   */
  private completionsOf(ids: readonly string[], opts: { maxTimeMS?: number; projection?: { _id: 1 } } = {}): Promise<Map<string, CompletionDoc>> {
    return byId(ids, (id) => this.completions.findOne({ _id: id }, opts));
  }

  /** The listing marks a journaled call needs before its journal document (ADR 0033): its principal's, if it has one. */
  private markListings(call: CallRecord): Promise<void> {
    const scopes: Scope[] = call.principal ? [{ scope: "principal", value: call.principal }] : [];
    return scopes.length > 0 ? this.marks.ensure(LISTED_AS, call.created_at, scopes) : Promise.resolve();
  }

  /** Inserts the call's pending copy. @returns false when one was already there. */
  private async insertPendingCopy(call: CallRecord): Promise<boolean> {
    try {
      await this.copyInserts.insert(toStored(call));
      return true;
    } catch (err) {
      if (!isDuplicateKey(err)) throw err;
      return false;
    }
  }

  /**
   * Journals a pending copy whose BeginCall crashed before its journal write. Its
   * capability may never have been handed out, but the copy is all that is known:
   * recovery treats it like any pending call. A concurrent BeginCall of the same call
   * writes the same document, so whichever lands first, they agree.
   */
  private async heal(copy: CallRecord): Promise<CallRecord | undefined> {
    // Gone since it was listed: the call finished and retention removed it (never heal it back).
    if (!(await this.pending.findOne({ _id: copy._id }, { projection: { _id: 1 } }))) return undefined;
    try {
      // A copy written before `lb` was kept gets it here; its marks go first, as in begin.
      const call = { ...copy, lb: listingBucketOf(copy.created_at) };
      await this.markListings(call);
      await this.calls.insertOne(toStored(call), MAJORITY);
      this.logger.warn({ call_id: copy._id, tool_id: copy.tool_id }, "journaled a call whose BeginCall crashed between its two writes");
    } catch (err) {
      if (!isDuplicateKey(err)) throw err;
    }
    const call = await this.get(copy._id);
    if (!call) throw refuse(Reasons.CONCURRENT_BEGIN, `call ${copy._id} changed while it was being recovered; list it again`, { call_id: copy._id });
    return call;
  }

  /**
   * Best effort: the completion (or indeterminate state) is already durable
   * and decides; a pending copy left behind is skipped and removed by listPending.
   */
  private async unmarkPending(callId: string): Promise<void> {
    try {
      await this.pending.deleteOne({ _id: callId }, MAJORITY);
    } catch (err) {
      this.logger.warn({ call_id: callId, err }, "could not remove the pending copy of a finished call; listing will skip and remove it");
    }
  }
}

/** The completion an entry implies for the call it completes (ADR 0034). */
function completionFromEntry(call: CallRecord, entry: EntryRef): CompletionDoc {
  return {
    _id: call._id,
    outcome: "succeeded",
    outcome_detail: `completed by its ledger write (entry ${entry._id})`,
    completed_at: entry.recorded_at,
    ...(call.principal !== undefined ? { completed_by: call.principal } : {}),
    lb: listingBucketOf(entry.recorded_at),
  };
}

/** Oldest first by (created_at, _id). */
function isAfter(call: CallRecord, after: JournalCursor): boolean {
  const t = call.created_at.getTime();
  return t > after.createdAt || (t === after.createdAt && call._id > after.id);
}

/** A page of pending calls from the copies and the open seconds, oldest first, each call once. */
function mergePages(copies: CallRecord[], open: CallRecord[], copiesNext: JournalCursor | undefined, limit: number): PendingPage {
  if (open.length === 0) return { calls: copies, ...(copiesNext ? { next: copiesNext } : {}) };
  const byId = new Map<string, CallRecord>();
  for (const c of [...copies, ...open]) if (!byId.has(c._id)) byId.set(c._id, c);
  const merged = [...byId.values()].sort((a, b) => a.created_at.getTime() - b.created_at.getTime() || (a._id < b._id ? -1 : a._id > b._id ? 1 : 0));
  const page = merged.slice(0, limit);
  const last = page[page.length - 1];
  const more = copiesNext !== undefined || merged.length > limit;
  if (!more) return { calls: page };
  return { calls: page, next: last ? { createdAt: last.created_at.getTime(), id: last._id } : copiesNext! };
}

function withCompletion(call: CallRecord, c: CompletionDoc): CallRecord {
  return {
    ...call,
    state: "completed",
    outcome: c.outcome,
    outcome_detail: c.outcome_detail,
    updated_at: c.completed_at,
    completed_at: c.completed_at,
    ...(c.completed_by !== undefined ? { completed_by: c.completed_by } : {}),
  };
}

function sameOutcomeOrRefuse(call: CallRecord, outcome: CallOutcomeName): { call: CallRecord; alreadyCompleted: true } {
  if (call.outcome === outcome) return { call, alreadyCompleted: true };
  throw refuse(
    Reasons.CALL_ALREADY_COMPLETED,
    `call ${call._id} is already completed with outcome ${call.outcome ?? "unknown"}; it cannot be completed as ${outcome}`,
    { call_id: call._id, outcome: call.outcome ?? "" },
  );
}

function notFound(callId: string): KeycapError {
  return refuse(Reasons.CALL_NOT_FOUND, `call ${JSON.stringify(callId)} is not in the journal`, { call_id: callId });
}
