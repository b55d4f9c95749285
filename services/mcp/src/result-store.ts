/**
 * The gateway's record of each governed call slot (ADR 0019's scheme, for MCP): one document
 * per slot in `mcp_results`, the slot as `_id`, so MongoDB's unique `_id` decides which
 * tools/call is forwarded (no transaction; FerretDB has none). A slot is an Idempotent call's
 * derived key (`key:<key>`), a Queryable call's request id (`request:<tool>:<id>`), or an
 * Unsafe call in flight (`unsafe:<fingerprint>`, removed when it ends).
 *
 * States (common/src/leased-slots.ts): `sending` (one tools/call holds a lease), `retryable`
 * (the last attempt got no answer; another may send under the same key), `done` (the
 * upstream's CallToolResult, stored as JSON text and replayed), `indeterminate` (an Unsafe or
 * Queryable call lost in a crash: never sent again; an operator settles it).
 */
import type { Db } from "mongodb";
import { LeasedSlots, type SlotDocument, type SlotState } from "../../common/src/leased-slots";

export type { SlotState };

/** The gateway process that holds a slot's lease: on the same host, a retry can see it is gone without waiting the lease out. */
export interface Holder {
  host: string;
  pid: number;
  /** Random per gateway process: a later process that got the same pid is not the holder. */
  instance: string;
}

interface SlotDoc extends SlotDocument {
  tool_id: string;
  /** The kernel call of the attempt that holds (or last held) the slot. */
  call_id: string;
  holder?: Holder;
  /** SHA-256 of the canonical arguments of the call that claimed the slot: a replay to other arguments is flagged. */
  arguments_sha256?: string;
  /** The stored CallToolResult as JSON text: MCP content nests arrays, which FerretDB does not store. */
  result_json?: string;
  is_error?: boolean;
}

/** A slot as the gateway reads it. */
export interface SlotRecord {
  slot: string;
  toolId: string;
  callId: string;
  state: SlotState;
  attempts: number;
  leaseUntil: Date;
  holder?: Holder;
  argumentsSha256?: string;
  resultJson?: string;
  recordedAt?: Date;
  lastError?: string;
}

export class ResultStore {
  private constructor(private readonly slots: LeasedSlots<SlotDoc>) {}

  /** Opens `mcp_results` and awaits its indexes. */
  static async open(db: Db): Promise<ResultStore> {
    const docs = db.collection<SlotDoc>("mcp_results");
    await docs.createIndex({ tool_id: 1, created_at: -1 });
    await docs.createIndex({ state: 1, recorded_at: 1 });
    return new ResultStore(new LeasedSlots(docs));
  }

  /**
   * Deletes stored results recorded before `before` (retention, DESIGN §13): the next call with
   * such a key is sent again, as a new effect. Slots in flight, retryable or indeterminate are
   * never deleted. Deletes at most `limit`; returns how many were deleted.
   */
  expire(before: Date, limit: number): Promise<number> {
    return this.slots.expireDone(before, limit);
  }

  async get(slot: string): Promise<SlotRecord | undefined> {
    const doc = await this.slots.get(slot);
    return doc ? recordOf(doc) : undefined;
  }

  /** Inserts the slot as `sending` (attempt 1) with a lease; false when it exists. */
  claimNew(slot: string, toolId: string, callId: string, leaseUntil: Date, holder: Holder, argumentsSha256: string): Promise<boolean> {
    return this.slots.claimNew(slot, { tool_id: toolId, call_id: callId, holder, arguments_sha256: argumentsSha256 }, leaseUntil);
  }

  /** Takes a retryable slot, or a sending one whose lease ran out, for a new attempt; true when this caller won it. */
  takeOver(seen: SlotRecord, callId: string, leaseUntil: Date, holder: Holder): Promise<boolean> {
    return this.slots.takeOver(seenOf(seen), leaseUntil, { call_id: callId, holder });
  }

  /** Stores the upstream's result for `attempt`; undefined when another attempt has taken the slot since. */
  complete(slot: string, attempt: number, resultJson: string, isError: boolean): Promise<Date | undefined> {
    return this.slots.complete(slot, attempt, { result_json: resultJson, is_error: isError });
  }

  /** Leaves the slot retryable after an attempt that got no answer. */
  release(slot: string, attempt: number, error: string): Promise<void> {
    return this.slots.release(slot, attempt, error);
  }

  /** Marks a slot whose outcome is unknown as indeterminate (compare-and-set on what was seen). */
  markIndeterminate(seen: SlotRecord, why: string): Promise<boolean> {
    return this.slots.markIndeterminate(seenOf(seen), why);
  }

  /** Removes a slot (an Unsafe call that ended, or an indeterminate one an operator settled), if unchanged since seen. */
  remove(slot: string, attempt: number, state: SlotState): Promise<boolean> {
    return this.slots.remove(slot, attempt, state);
  }
}

function seenOf(seen: SlotRecord): { id: string; attempts: number; state: SlotState } {
  return { id: seen.slot, attempts: seen.attempts, state: seen.state };
}

function recordOf(doc: SlotDoc): SlotRecord {
  return {
    slot: doc._id,
    toolId: doc.tool_id,
    callId: doc.call_id,
    state: doc.state,
    attempts: doc.attempts,
    leaseUntil: doc.lease_until,
    ...(doc.holder ? { holder: doc.holder } : {}),
    ...(doc.arguments_sha256 !== undefined ? { argumentsSha256: doc.arguments_sha256 } : {}),
    ...(doc.result_json !== undefined ? { resultJson: doc.result_json } : {}),
    ...(doc.recorded_at ? { recordedAt: doc.recorded_at } : {}),
    ...(doc.last_error !== undefined ? { lastError: doc.last_error } : {}),
  };
}
