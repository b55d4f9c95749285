/**
 * The ledger's share of the retention policy (docs/retention.md, ADR 0031): spent single-use
 * capability ids once their capability has expired, refusal records (shared with the kernel:
 * whichever holds the `rejections` lease sweeps them), shadow runs' would-be effects and, only when an operator sets a retention for them, entries.
 */
import { CALL_COMPLETIONS, JOURNAL_CALLS, UNSETTLED_SECONDS } from "../../common/src/shared-collections";
import type { Db } from "mongodb";
import type { KeycapConfig } from "../../common/src/config";
import type { Logger } from "../../common/src/logger";
import type { Metrics } from "../../common/src/metrics";
import type { RejectionAudit } from "../../common/src/rejection-audit";
import { cutoff, RetentionSweeper, type RetentionTask } from "../../common/src/retention-sweeper";
import type { EntryStore } from "./entry-store";
import type { ShadowStore } from "./shadow-store";

/** The ledger's retention tasks; a kind kept forever (0) has none. */
export function ledgerRetentionTasks(db: Db, config: KeycapConfig, store: EntryStore, audit: RejectionAudit, shadow?: ShadowStore): RetentionTask[] {
  const { retention, clockToleranceSeconds } = config;
  const tasks: RetentionTask[] = [
    // A record expires at exp + tolerance; one more tolerance covers a sweeping replica whose clock runs ahead.
    { name: "spent_capabilities", sweep: (limit) => store.expireSpentCapabilities(new Date(Date.now() - clockToleranceSeconds * 1000), limit) },
  ];
  if (retention.refusalsSeconds > 0) tasks.push(audit.retentionTask(retention.refusalsSeconds));
  // A shadow run's would-be effects are sandbox records (ADR 0028): nothing live depends on them.
  if (shadow && retention.shadowEntriesSeconds > 0) {
    tasks.push({ name: "shadow_entries", sweep: (limit) => shadow.expire(cutoff(retention.shadowEntriesSeconds) as Date, limit) });
  }
  if (retention.entriesSeconds > 0) {
    store.setEntryRetention(retention.entriesSeconds);
    const before = (): Date => cutoff(retention.entriesSeconds) as Date;
    tasks.push({ name: "entries", sweep: (limit) => store.expireEntries(before(), limit, (entries) => unfinishedEntries(db, entries)) });
  }
  return tasks;
}

/** Starts the ledger's sweeper. */
export async function startLedgerRetention(
  db: Db,
  config: KeycapConfig,
  stores: { store: EntryStore; audit: RejectionAudit; shadow: ShadowStore },
  logger: Logger,
  metrics?: Metrics,
): Promise<RetentionSweeper> {
  const tasks = ledgerRetentionTasks(db, config, stores.store, stores.audit, stores.shadow);
  const { sweepIntervalMs, batch } = config.retention;
  return (await RetentionSweeper.open(db, tasks, { intervalMs: sweepIntervalMs, batch, service: "ledger", logger, metrics })).start();
}

/**
 * Which of these entries belong to unfinished work: their call, or any pending call under the
 * same key or request id, is still pending (a pending copy exists) or marked indeterminate and
 * not completed. Recovery of such a call asks whether its effect happened (or retries under the
 * key, expecting a duplicate), so the entry must stay. Read from the kernel's journal
 * collections by name (ADR 0007): the ledger holds no handle on the kernel.
 */
export async function unfinishedEntries(db: Db, entries: readonly UnfinishedProbe[]): Promise<Set<string>> {
  if (entries.length === 0) return new Set();
  const only = { projection: { _id: 1, key: 1, request_id: 1 } };
  const callIds = entries.map((e) => e.call_id);
  const keys = entries.map((e) => e.key).filter((k) => k !== "");
  const requests = entries.map((e) => e.request_id).filter((r) => r !== "");
  type Probe = { _id: string; key?: string; request_id?: string; state?: string };
  const [pending, marked, open] = await Promise.all([
    // pending_calls holds only unfinished calls: small, whatever its filter.
    db
      .collection<Probe>("pending_calls")
      .find({ $or: [{ _id: { $in: callIds } }, { key: { $in: keys } }, { request_id: { $in: requests } }] }, only)
      .toArray(),
    db
      .collection<Probe>(JOURNAL_CALLS)
      .find({ _id: { $in: callIds }, state: "indeterminate" }, only)
      .toArray(),
    openCalls(db),
  ]);
  const settled = new Set(
    marked.length
      ? (
          await db
            .collection<Probe>(CALL_COMPLETIONS)
            .find({ _id: { $in: marked.map((c) => c._id) } }, only)
            .toArray()
        ).map((c) => c._id)
      : [],
  );
  const busy = [...pending, ...marked.filter((c) => !settled.has(c._id)), ...open];
  const busyCalls = new Set(busy.map((c) => c._id));
  const busyKeys = new Set(busy.flatMap((c) => [c.key ?? "", c.request_id ?? ""]).filter((k) => k !== ""));
  return new Set(entries.filter((e) => busyCalls.has(e.call_id) || busyKeys.has(e.key) || busyKeys.has(e.request_id)).map((e) => e._id));
}

/**
 * Calls journaled in seconds a kernel replica has not settled yet (ADR 0034): no pending copy
 * yet, and no completion. A few seconds, each read by `lb`; an entry a call of these completes
 * stays until the kernel has written that completion.
 */
async function openCalls(db: Db): Promise<Array<{ _id: string; key?: string; request_id?: string }>> {
  const seconds = new Set(
    (
      await db
        .collection<{ lb: string }>(UNSETTLED_SECONDS)
        .find({}, { projection: { lb: 1 } })
        .toArray()
    ).map((m) => m.lb),
  );
  const out: Array<{ _id: string; key?: string; request_id?: string }> = [];
  for (const lb of seconds) {
    const calls = await db
      .collection<{ _id: string; key?: string; request_id?: string; state: string; lb: string }>(JOURNAL_CALLS)
      .find({ lb, state: "pending" }, { projection: { _id: 1, key: 1, request_id: 1 } })
      .toArray();
    for (const c of calls) if (!(await db.collection<{ _id: string }>(CALL_COMPLETIONS).findOne({ _id: c._id }, { projection: { _id: 1 } }))) out.push(c);
  }
  return out;
}

/** What {@link unfinishedEntries} needs of an entry. */
export interface UnfinishedProbe {
  _id: string;
  call_id: string;
  key: string;
  request_id: string;
}
