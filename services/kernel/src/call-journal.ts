import { status } from "@grpc/grpc-js";
import { MongoServerError, type Collection, type Db, type Filter } from "mongodb";
import type { CapabilityClaims, EffectName } from "../../common/src/capability";
import { KeycapError } from "../../common/src/errors";

export type CallStateName = "pending" | "completed" | "indeterminate";
export type CallOutcomeName = "succeeded" | "failed";

/** A journaled call, as stored. The arguments are kept exactly as received. */
export interface CallRecord {
  _id: string;
  tool_id: string;
  run_id: string;
  arguments_json: string;
  effect: EffectName;
  key?: string;
  request_id?: string;
  attempt: number;
  state: CallStateName;
  outcome?: CallOutcomeName;
  outcome_detail?: string;
  /** Claims of the current attempt's capability: re-signed (deterministic Ed25519) on a repeated BeginCall. */
  capability: CapabilityClaims;
  created_at: Date;
  updated_at: Date;
  /** Last refused recovery, for operators (e.g. a key that no longer re-derives). */
  last_resume_refusal?: { reason: string; message: string; at: Date };
}

/**
 * The kernel's durable call journal. A call is written (write concern
 * majority, result checked) before its capability is returned, so a crash
 * after BeginCall always leaves a pending call to recover.
 */
export class CallJournal {
  private constructor(private readonly calls: Collection<CallRecord>) {}

  static async open(db: Db): Promise<CallJournal> {
    const calls = db.collection<CallRecord>("calls");
    // Awaited at start: a failure stops the start (no fire-and-forget indexes).
    await calls.createIndex({ state: 1, created_at: 1, _id: 1 });
    await calls.createIndex({ state: 1, tool_id: 1, created_at: 1, _id: 1 });
    return new CallJournal(calls);
  }

  /**
   * Journals a new call. When the call id exists: the same tool, run and
   * arguments return the existing call (existing = true); anything else is
   * refused, never overwritten.
   */
  async begin(record: CallRecord): Promise<{ call: CallRecord; existing: boolean }> {
    try {
      const res = await this.calls.insertOne(record, { writeConcern: { w: "majority" } });
      if (!res.acknowledged) throw new KeycapError(status.UNAVAILABLE, "JOURNAL_WRITE_UNACKNOWLEDGED", "the call journal did not acknowledge the write; retry");
      return { call: record, existing: false };
    } catch (err) {
      if (!(err instanceof MongoServerError && err.code === 11000)) throw err;
    }
    const existing = await this.get(record._id);
    if (!existing) throw new KeycapError(status.ABORTED, "CONCURRENT_BEGIN", "the call changed during BeginCall; retry");
    if (existing.tool_id !== record.tool_id || existing.run_id !== record.run_id || existing.arguments_json !== record.arguments_json) {
      throw new KeycapError(
        status.ALREADY_EXISTS,
        "CALL_ID_CONFLICT",
        `call ${record._id} was already begun with a different tool, run id or arguments; a call id names one call`,
        { call_id: record._id },
      );
    }
    return { call: existing, existing: true };
  }

  async get(callId: string): Promise<CallRecord | undefined> {
    return (await this.calls.findOne({ _id: callId })) ?? undefined;
  }

  async require(callId: string): Promise<CallRecord> {
    const call = await this.get(callId);
    if (!call) throw new KeycapError(status.NOT_FOUND, "CALL_NOT_FOUND", `call ${JSON.stringify(callId)} is not in the journal`, { call_id: callId });
    return call;
  }

  /**
   * Completes a pending (or operator-resolved indeterminate) call. Completing
   * again with the same outcome is a no-op; with another outcome it is refused.
   */
  async complete(callId: string, outcome: CallOutcomeName, detail: string): Promise<{ call: CallRecord; alreadyCompleted: boolean }> {
    const now = new Date();
    const updated = await this.calls.findOneAndUpdate(
      { _id: callId, state: { $in: ["pending", "indeterminate"] } },
      { $set: { state: "completed", outcome, outcome_detail: detail, updated_at: now } },
      { returnDocument: "after", writeConcern: { w: "majority" } },
    );
    if (updated) return { call: updated, alreadyCompleted: false };
    const call = await this.require(callId);
    if (call.state === "completed" && call.outcome === outcome) return { call, alreadyCompleted: true };
    throw new KeycapError(
      status.FAILED_PRECONDITION,
      "CALL_ALREADY_COMPLETED",
      `call ${callId} is already completed with outcome ${call.outcome ?? "unknown"}; it cannot be completed as ${outcome}`,
      { call_id: callId, outcome: call.outcome ?? "" },
    );
  }

  /**
   * Moves a pending call to its next attempt with new capability claims.
   * Compare-and-set on the attempt number, so two concurrent recoveries cannot
   * both win.
   */
  async advanceAttempt(call: CallRecord, claims: CapabilityClaims): Promise<CallRecord> {
    const updated = await this.calls.findOneAndUpdate(
      { _id: call._id, state: "pending", attempt: call.attempt },
      { $set: { attempt: claims.attempt, capability: claims, updated_at: new Date() } },
      { returnDocument: "after", writeConcern: { w: "majority" } },
    );
    if (!updated) {
      throw new KeycapError(status.ABORTED, "CONCURRENT_RESUME", `call ${call._id} was resumed or completed concurrently; list it again`, { call_id: call._id });
    }
    return updated;
  }

  /** Marks a pending call indeterminate (Unsafe at recovery): an operator decides. */
  async markIndeterminate(callId: string, reason: string, message: string): Promise<void> {
    const now = new Date();
    await this.calls.updateOne(
      { _id: callId, state: "pending" },
      { $set: { state: "indeterminate", updated_at: now, last_resume_refusal: { reason, message, at: now } } },
      { writeConcern: { w: "majority" } },
    );
  }

  /** Records a refused recovery on the call, for operators. */
  async recordResumeRefusal(callId: string, reason: string, message: string): Promise<void> {
    const now = new Date();
    await this.calls.updateOne({ _id: callId }, { $set: { updated_at: now, last_resume_refusal: { reason, message, at: now } } }, { writeConcern: { w: "majority" } });
  }

  /** Pending calls oldest first, after the cursor. */
  async listPending(toolId: string, after: { createdAt: number; id: string } | undefined, limit: number): Promise<CallRecord[]> {
    const filter: Filter<CallRecord> = { state: "pending" };
    if (toolId) filter.tool_id = toolId;
    if (after) {
      const at = new Date(after.createdAt);
      filter.$or = [{ created_at: { $gt: at } }, { created_at: at, _id: { $gt: after.id } }];
    }
    return this.calls.find(filter).sort({ created_at: 1, _id: 1 }).limit(limit).toArray();
  }
}
