/**
 * The gateway's record of each governed call slot (ADR 0019's scheme, for MCP): one document
 * per slot in `mcp_results`, the slot as `_id`, so MongoDB's unique `_id` decides which
 * tools/call is forwarded (no transaction; FerretDB has none). A slot is an Idempotent call's
 * derived key (`key:<key>`), a Queryable call's request id (`request:<tool>:<id>`), or an
 * Unsafe call in flight (`unsafe:<fingerprint>`, removed when it ends).
 *
 * States: `sending` (one tools/call holds a lease), `retryable` (the last attempt got no
 * answer; another may send under the same key), `done` (the upstream's CallToolResult,
 * stored as JSON text and replayed), `indeterminate` (an Unsafe or Queryable call lost in a
 * crash: never sent again; an operator settles it). Every change after the insert is a
 * compare-and-set on `attempts`, so a call that lost its lease cannot overwrite the attempt
 * that took over.
 */
import type { Collection, Db } from "mongodb";
import { isDuplicateKey } from "../../common/src/mongo";

export type SlotState = "sending" | "retryable" | "done" | "indeterminate";

/** The gateway process that holds a slot's lease: on the same host, a retry can see it is gone without waiting the lease out. */
export interface Holder {
  host: string;
  pid: number;
  /** Random per gateway process: a later process that got the same pid is not the holder. */
  instance: string;
}

interface SlotDoc {
  _id: string;
  tool_id: string;
  /** The kernel call of the attempt that holds (or last held) the slot. */
  call_id: string;
  state: SlotState;
  attempts: number;
  lease_until: Date;
  holder?: Holder;
  /** SHA-256 of the canonical arguments of the call that claimed the slot: a replay to other arguments is flagged. */
  arguments_sha256?: string;
  created_at: Date;
  updated_at: Date;
  /** The stored CallToolResult as JSON text: MCP content nests arrays, which FerretDB does not store. */
  result_json?: string;
  is_error?: boolean;
  recorded_at?: Date;
  last_error?: string;
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
  private constructor(private readonly docs: Collection<SlotDoc>) {}

  /** Opens `mcp_results` and awaits its indexes. */
  static async open(db: Db): Promise<ResultStore> {
    const docs = db.collection<SlotDoc>("mcp_results");
    await docs.createIndex({ tool_id: 1, created_at: -1 });
    await docs.createIndex({ state: 1, recorded_at: 1 });
    return new ResultStore(docs);
  }

  /**
   * Deletes stored results recorded before `before` (retention, DESIGN §13): the next call with
   * such a key is sent again, as a new effect. Slots in flight, retryable or indeterminate are
   * never deleted. Returns how many were deleted.
   */
  async expire(before: Date): Promise<number> {
    const res = await this.docs.deleteMany({ state: "done", recorded_at: { $lt: before } }, { writeConcern: { w: "majority" } });
    return res.deletedCount;
  }

  async get(slot: string): Promise<SlotRecord | undefined> {
    const doc = await this.docs.findOne({ _id: slot });
    return doc ? recordOf(doc) : undefined;
  }

  /** Inserts the slot as `sending` (attempt 1) with a lease; false when it exists. */
  async claimNew(slot: string, toolId: string, callId: string, leaseUntil: Date, holder: Holder, argumentsSha256: string): Promise<boolean> {
    const now = new Date();
    try {
      await this.docs.insertOne(
        {
          _id: slot,
          tool_id: toolId,
          call_id: callId,
          state: "sending",
          attempts: 1,
          lease_until: leaseUntil,
          holder,
          arguments_sha256: argumentsSha256,
          created_at: now,
          updated_at: now,
        },
        { writeConcern: { w: "majority" } },
      );
      return true;
    } catch (err) {
      if (isDuplicateKey(err)) return false;
      throw err;
    }
  }

  /** Takes a retryable slot, or a sending one whose lease ran out, for a new attempt; true when this caller won it. */
  async takeOver(seen: SlotRecord, callId: string, leaseUntil: Date, holder: Holder): Promise<boolean> {
    // attempts is set, not $inc'ed: FerretDB v1.24 has no atomic $inc; the filter on the seen value is the compare-and-set.
    const res = await this.docs.updateOne(
      { _id: seen.slot, attempts: seen.attempts, state: seen.state },
      { $set: { state: "sending", call_id: callId, attempts: seen.attempts + 1, lease_until: leaseUntil, holder, updated_at: new Date() } },
      { writeConcern: { w: "majority" } },
    );
    return res.modifiedCount === 1;
  }

  /** Stores the upstream's result for `attempt`; undefined when another attempt has taken the slot since. */
  async complete(slot: string, attempt: number, resultJson: string, isError: boolean): Promise<Date | undefined> {
    const recordedAt = new Date();
    const res = await this.docs.updateOne(
      { _id: slot, attempts: attempt, state: "sending" },
      { $set: { state: "done", result_json: resultJson, is_error: isError, recorded_at: recordedAt, updated_at: recordedAt } },
      { writeConcern: { w: "majority" } },
    );
    return res.modifiedCount === 1 ? recordedAt : undefined;
  }

  /** Leaves the slot retryable after an attempt that got no answer. */
  async release(slot: string, attempt: number, error: string): Promise<void> {
    await this.docs.updateOne(
      { _id: slot, attempts: attempt, state: "sending" },
      { $set: { state: "retryable", lease_until: new Date(), last_error: error.slice(0, 512), updated_at: new Date() } },
      { writeConcern: { w: "majority" } },
    );
  }

  /** Marks a slot whose outcome is unknown as indeterminate (compare-and-set on what was seen). */
  async markIndeterminate(seen: SlotRecord, why: string): Promise<boolean> {
    const res = await this.docs.updateOne(
      { _id: seen.slot, attempts: seen.attempts, state: seen.state },
      { $set: { state: "indeterminate", last_error: why.slice(0, 512), updated_at: new Date() } },
      { writeConcern: { w: "majority" } },
    );
    return res.modifiedCount === 1 || seen.state === "indeterminate";
  }

  /** Removes a slot (an Unsafe call that ended, or an indeterminate one an operator settled), if unchanged since seen. */
  async remove(slot: string, attempt: number, state: SlotState): Promise<boolean> {
    const res = await this.docs.deleteOne({ _id: slot, attempts: attempt, state }, { writeConcern: { w: "majority" } });
    return res.deletedCount === 1;
  }
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
