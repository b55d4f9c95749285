/**
 * Collections one service writes and another reads, named once: the kernel and the ledger share
 * their database (ADR 0034), and the kernel settles calls from the ledger's entries.
 */

/** The ledger's effects (services/ledger/src/entry-store.ts), read back by the kernel's settler. */
export const LEDGER_ENTRIES = "entries";

/** The kernel's journal of calls (services/kernel/src/call-journal.ts), read by the ledger's retention. */
export const JOURNAL_CALLS = "calls";

/** The kernel's completions of calls, one per call (`_id` = call id). */
export const CALL_COMPLETIONS = "call_completions";

/** The kernel replicas' marks of seconds whose calls are not settled yet (ADR 0034). */
export const UNSETTLED_SECONDS = "unsettled_seconds";
