/**
 * The shadow store (ADR 0028): where a shadow run's would-be effects go, in
 * `shadow_entries`, never in `entries`. The same rule as the live store: one document per
 * effect id, the unique `_id` decides, a second write under it is a duplicate. Not
 * counted in the live totals (GetStats), not cached, not listed by ListEntries.
 */
import type { Collection, Db } from "mongodb";
import { isDuplicateKey } from "../../common/src/mongo";
import { deleteBatch } from "../../common/src/retention-sweeper";
import type { EntryDoc } from "./entry-store";

/** A shadow effect: an entry and the shadow run it came from. */
export type ShadowEntryDoc = EntryDoc & { shadow: true };

const MAJORITY = { writeConcern: { w: "majority" as const } };

export class ShadowStore {
  private constructor(private readonly entries: Collection<ShadowEntryDoc>) {}

  /** Opens `shadow_entries`; its index is awaited (a failure stops the start). */
  static async open(db: Db): Promise<ShadowStore> {
    const entries = db.collection<ShadowEntryDoc>("shadow_entries");
    await entries.createIndex({ tool_id: 1, recorded_at: -1, _id: -1 }, { name: "tool_newest_first" });
    await entries.createIndex({ recorded_at: 1 }, { name: "recorded_at" });
    return new ShadowStore(entries);
  }

  /** Inserts the effect; when its effect id is taken, the entry already there (a duplicate). */
  async insert(doc: EntryDoc): Promise<{ entry: EntryDoc; duplicate: boolean }> {
    try {
      await this.entries.insertOne({ ...doc, shadow: true }, MAJORITY);
      return { entry: doc, duplicate: false };
    } catch (err) {
      if (!isDuplicateKey(err)) throw err;
    }
    const existing = await this.entries.findOne({ _id: doc._id });
    if (!existing) throw new Error(`shadow entry ${doc._id} vanished after a duplicate insert`);
    return { entry: existing, duplicate: true };
  }

  /**
   * Retention (ADR 0031): removes up to `limit` shadow effects recorded before `before`. A
   * shadow run's retry after that is a new would-be effect, as a live key is after its entry's
   * retention; nothing live depends on these records.
   */
  expire(before: Date, limit: number): Promise<number> {
    return deleteBatch(this.entries, { recorded_at: { $lt: before } }, limit);
  }

  async findByEffectId(effectId: string): Promise<EntryDoc | null> {
    return this.entries.findOne({ _id: effectId });
  }
}
