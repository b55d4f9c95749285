/**
 * Where each replay run is (ADR 0028): a call's position is the count of calls already
 * begun in its replay run. A position is taken by inserting one document whose `_id` is
 * `<replay run>#<position>`, so MongoDB's unique `_id` decides which call holds it, on any
 * backend (FerretDB v1.24 has no transactions and does not isolate updates, so a counter
 * moved by `$inc` or by an update filtered on the value seen could give two calls one
 * position). A small per-run document holds the next free position as a hint, moved by a
 * compare-and-set on the value seen (as leased-slots.ts does); a stale hint only costs
 * a refused insert, never a second holder.
 */
import type { Collection, Db } from "mongodb";
import { isDuplicateKey } from "../../common/src/mongo";

/** One taken position of a replay run. */
export interface PositionDoc {
  _id: string;
  run_id: string;
  position: number;
  /** The replay call that holds it (a repeated BeginCall of that call keeps it). */
  call_id: string;
  /** The recorded call it matched. */
  recorded_call_id: string;
  taken_at: Date;
}

/** The next position of a replay run, as last seen (a hint). */
interface RunDoc {
  _id: string;
  next: number;
}

const MAJORITY = { writeConcern: { w: "majority" as const } };

export class ReplayPositions {
  /** Runs retention found still in use (a recent position, a pending call): skipped until a sweep finds nothing else. */
  private readonly keptRuns = new Set<string>();

  private constructor(
    private readonly positions: Collection<PositionDoc>,
    private readonly runs: Collection<RunDoc>,
  ) {}

  /** Opens the collections; the index is awaited (a failure stops the start). */
  static async open(db: Db): Promise<ReplayPositions> {
    const positions = db.collection<PositionDoc>("replay_positions");
    await positions.createIndex({ run_id: 1, call_id: 1 });
    await positions.createIndex({ taken_at: 1 }, { name: "taken_at" });
    return new ReplayPositions(positions, db.collection<RunDoc>("replay_runs"));
  }

  /** The position a call already holds in its replay run (a repeated BeginCall), if any. */
  async heldBy(runId: string, callId: string): Promise<PositionDoc | undefined> {
    return (await this.positions.findOne({ run_id: runId, call_id: callId })) ?? undefined;
  }

  /** The first position not known to be taken. */
  async next(runId: string): Promise<number> {
    return (await this.runs.findOne({ _id: runId }))?.next ?? 0;
  }

  /** Whether some call holds `position` (read by `_id`). */
  async isTaken(runId: string, position: number): Promise<boolean> {
    return (await this.positions.findOne({ _id: `${runId}#${position}` }, { projection: { _id: 1 } })) !== null;
  }

  /** Takes `position` for `callId`; false when another call holds it. */
  async take(runId: string, position: number, callId: string, recordedCallId: string): Promise<boolean> {
    const doc: PositionDoc = { _id: `${runId}#${position}`, run_id: runId, position, call_id: callId, recorded_call_id: recordedCallId, taken_at: new Date() };
    try {
      await this.positions.insertOne(doc, MAJORITY);
    } catch (err) {
      if (isDuplicateKey(err)) return false;
      throw err;
    }
    await this.advanceHint(runId, position + 1);
    return true;
  }

  /**
   * Retention (ADR 0031): forgets replay runs idle since `before` (no position taken since),
   * up to `limit` old positions' worth. A run with a call still pending is kept (`pending`
   * says which calls are), so a repeated BeginCall of that call finds its position again.
   * The hint goes first: a crash after it leaves old positions, which the next sweep finds.
   * @returns how many positions were removed.
   */
  async expireIdleRuns(before: Date, limit: number, pending: (callIds: string[]) => Promise<Set<string>>): Promise<number> {
    const old = await this.positions
      .find({ taken_at: { $lt: before }, run_id: { $nin: [...this.keptRuns] } }, { projection: { run_id: 1 } })
      .limit(limit)
      .toArray();
    // Runs kept for a pending call are looked at again once nothing else is left.
    if (old.length === 0) this.keptRuns.clear();
    let removed = 0;
    for (const runId of new Set(old.map((p) => p.run_id))) {
      const recent = await this.positions.findOne({ run_id: runId, taken_at: { $gte: before } }, { projection: { _id: 1 } });
      const held = recent ? [] : await this.positions.find({ run_id: runId }, { projection: { call_id: 1 } }).toArray();
      if (recent || (await pending(held.map((p) => p.call_id))).size > 0) {
        if (this.keptRuns.size < 1000) this.keptRuns.add(runId);
        continue;
      }
      await this.runs.deleteOne({ _id: runId }, MAJORITY);
      removed += (await this.positions.deleteMany({ run_id: runId, taken_at: { $lt: before } }, MAJORITY)).deletedCount;
    }
    return removed;
  }

  /** Moves the hint on to `next` unless it is there already: best effort, the inserts decide. */
  private async advanceHint(runId: string, next: number): Promise<void> {
    const seen = await this.runs.findOne({ _id: runId });
    try {
      if (!seen) await this.runs.insertOne({ _id: runId, next }, MAJORITY);
      else if (seen.next < next) await this.runs.updateOne({ _id: runId, next: seen.next }, { $set: { next } }, MAJORITY);
    } catch (err) {
      if (!isDuplicateKey(err)) throw err;
    }
  }
}
