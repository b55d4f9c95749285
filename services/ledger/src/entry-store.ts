/**
 * Where effects live: the `entries` collection (one document per effect, `_id` = the
 * effect id from the write rule) and `capability_uses` (spent single-use capability ids,
 * `_id` = jti). Every uniqueness rule is an `_id` or a field present in every document,
 * because FerretDB ignores `sparse` and refuses partial indexes
 * (docs/decisions/0004-ledger-storage.md).
 *
 * Exactly-once rests on MongoDB refusing a second document with the same `_id`
 * (error 11000), never on a read before the write.
 */
import { Binary, MongoServerError, type Collection, type Db, type Filter } from "mongodb";
import type { EffectName } from "../../common/src/capability";

/** One effect, as stored. */
export interface EntryDoc {
  /** The effect id (idem:<key>, req:<tool>:<request id>, cap:<jti>). */
  _id: string;
  /** Opaque id given to clients. */
  entry_id: string;
  tool_id: string;
  effect: EffectName;
  call_id: string;
  attempt: number;
  /** jti of the capability the first write carried. */
  capability_id: string;
  /** "" unless idempotent. */
  key: string;
  /** "" unless queryable. */
  request_id: string;
  payload: Buffer | Binary;
  /** Lowercase hex SHA-256 of payload. */
  payload_sha256: string;
  recorded_at: Date;
  duplicate_count: number;
  payload_mismatch: boolean;
  payload_mismatch_count: number;
}

interface CapabilityUseDoc {
  _id: string;
  tool_id: string;
  used_at: Date;
  /** After this the capability cannot verify any more, so the record can go. */
  expires_at: Date;
}

/** Keyset cursor of a listing: the last document of the previous page. */
export interface EntryCursor {
  recordedAt: Date;
  id: string;
}

/** Totals for GetStats. */
export interface EntryTotals {
  entries: number;
  duplicates: number;
  payloadMismatches: number;
}

/** True for MongoDB's duplicate-key error. */
export function isDuplicateKey(err: unknown): boolean {
  return err instanceof MongoServerError ? err.code === 11000 : (err as { code?: unknown } | null)?.code === 11000;
}

export class EntryStore {
  private constructor(
    private readonly entries: Collection<EntryDoc>,
    private readonly uses: Collection<CapabilityUseDoc>,
  ) {}

  /** Opens the collections and creates their indexes; a failure stops the start. */
  static async open(db: Db): Promise<EntryStore> {
    const entries = db.collection<EntryDoc>("entries");
    const uses = db.collection<CapabilityUseDoc>("capability_uses");
    // One index per command: FerretDB v1.24 drops the connection when a multi-index
    // createIndexes names indexes that already exist (every restart would fail).
    await entries.createIndex({ entry_id: 1 }, { name: "entry_id_unique", unique: true });
    await entries.createIndex({ recorded_at: -1, _id: -1 }, { name: "newest_first" });
    await entries.createIndex({ tool_id: 1, recorded_at: -1, _id: -1 }, { name: "tool_newest_first" });
    await uses.createIndex({ expires_at: 1 }, { name: "expires_at" });
    return new EntryStore(entries, uses);
  }

  /**
   * Claims an effect with one insert.
   * @returns false when an entry with that `_id` already exists (nothing was written).
   */
  async insert(doc: EntryDoc): Promise<boolean> {
    try {
      const res = await this.entries.insertOne(doc);
      if (!res.acknowledged) throw new Error("entries insert was not acknowledged");
      return true;
    } catch (err) {
      if (isDuplicateKey(err)) return false;
      throw err;
    }
  }

  /**
   * Counts a write that hit an existing entry and returns that entry (after counting).
   * Common case, same payload: one findOneAndUpdate. Different payload: a second one
   * that flags the stored entry. Both select by `_id` alone, the one filter every
   * backend answers from its primary index (FerretDB scans for anything more).
   */
  async recordDuplicate(effectId: string, payloadSha256: string): Promise<{ entry: EntryDoc; payloadMismatch: boolean }> {
    const counted = await this.entries.findOneAndUpdate({ _id: effectId }, { $inc: { duplicate_count: 1 } }, { returnDocument: "after" });
    // Entries are never deleted, so the insert's collision means it exists.
    if (!counted) throw new Error(`entry ${effectId} collided on insert but cannot be found`);
    if (counted.payload_sha256 === payloadSha256) return { entry: counted, payloadMismatch: false };
    const flagged = await this.entries.findOneAndUpdate(
      { _id: effectId },
      { $inc: { payload_mismatch_count: 1 }, $set: { payload_mismatch: true } },
      { returnDocument: "after" },
    );
    return { entry: flagged ?? counted, payloadMismatch: true };
  }

  /**
   * Spends a single-use capability id.
   * @returns false when it was spent before.
   */
  async spendCapability(jti: string, toolId: string, expiresAt: Date): Promise<boolean> {
    try {
      const res = await this.uses.insertOne({ _id: jti, tool_id: toolId, used_at: new Date(), expires_at: expiresAt });
      if (!res.acknowledged) throw new Error("capability_uses insert was not acknowledged");
      return true;
    } catch (err) {
      if (isDuplicateKey(err)) return false;
      throw err;
    }
  }

  /**
   * Forgets spent capability ids whose capability has expired (it can no longer verify,
   * so it can no longer be reused). FerretDB has no TTL indexes; the ledger calls this.
   */
  async pruneSpentCapabilities(now = new Date()): Promise<number> {
    const res = await this.uses.deleteMany({ expires_at: { $lt: now } });
    return res.deletedCount;
  }

  async findByEffectId(effectId: string): Promise<EntryDoc | null> {
    return this.entries.findOne({ _id: effectId });
  }

  async findByEntryId(entryId: string): Promise<EntryDoc | null> {
    return this.entries.findOne({ entry_id: entryId });
  }

  /** Newest first, `limit` documents after `cursor`. */
  async list(toolId: string, cursor: EntryCursor | undefined, limit: number): Promise<EntryDoc[]> {
    const filter: Filter<EntryDoc> = {};
    if (toolId !== "") filter.tool_id = toolId;
    if (cursor) {
      filter.$or = [{ recorded_at: { $lt: cursor.recordedAt } }, { recorded_at: cursor.recordedAt, _id: { $lt: cursor.id } }];
    }
    return this.entries.find(filter).sort({ recorded_at: -1, _id: -1 }).limit(limit).toArray();
  }

  async totals(): Promise<EntryTotals> {
    const [entries, duplicates, payloadMismatches] = await Promise.all([
      this.entries.countDocuments({}),
      this.sum("$duplicate_count"),
      this.sum("$payload_mismatch_count"),
    ]);
    return { entries, duplicates, payloadMismatches };
  }

  /**
   * Sum of one field over all entries. One accumulator per pipeline: FerretDB v1.24
   * computes only the first accumulator of a $group correctly (checked by hand).
   */
  private async sum(field: string): Promise<number> {
    const [row] = await this.entries.aggregate<{ n: number }>([{ $group: { _id: "all", n: { $sum: field } } }]).toArray();
    return row?.n ?? 0;
  }
}

/** The stored payload as a Buffer (the driver reads BSON binary back as Binary). */
export function payloadBuffer(p: Buffer | Binary): Buffer {
  if (Buffer.isBuffer(p)) return p;
  const bytes = p.buffer;
  return Buffer.from(bytes.buffer, bytes.byteOffset, p.position);
}
