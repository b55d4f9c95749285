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
import { LEDGER_ENTRIES } from "../../common/src/shared-collections";
import { randomUUID } from "node:crypto";
import { Binary, type Collection, type Db, type Document, type IndexSpecification } from "mongodb";
import { InsertBatcher } from "../../common/src/insert-batcher";
import { indexesOf, isDuplicateKey } from "../../common/src/mongo";
import { createListingIndex, listingBucketOf, listNewestFirst, ListingMarks, scopesOf } from "../../common/src/bucketed-listing";
import { deleteBatch } from "../../common/src/retention-sweeper";
import type { EffectName } from "../../capability/src";
import type { Logger } from "../../common/src/logger";
import { StatsCounters } from "../../common/src/stats-counters";

/** One effect, as stored. */
export interface EntryDoc {
  /** The effect id (idem:<key>, req:["<tool>","<request id>"] (older: req:<tool>:<request id>), cap:<jti>). */
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
  /** The second of `recorded_at` its listings read it by (ADR 0033); set by `insert`, absent on entries from before. */
  lb?: string;
  /** Set once a duplicate write carried another payload (an anomaly worth auditing). */
  payload_mismatch: boolean;
  /** The principal that began the call (the capability's `sub`); absent on entries written before principals existed. */
  principal?: string;
}

/**
 * One write that hit an existing entry. Duplicates are recorded by insert, never
 * by updating the entry: inserts are cheap and exact on every backend, while an
 * update per retry made a retry storm costlier than the original traffic
 * (FerretDB rewrites a document per update, in time proportional to the
 * collection) and lost concurrent increments on FerretDB.
 */
export interface DuplicateDoc {
  _id: string;
  effect_id: string;
  tool_id: string;
  call_id: string;
  attempt: number;
  capability_id: string;
  payload_sha256: string;
  payload_mismatch: boolean;
  at: Date;
  /**
   * Mismatching writes only (absent on those recorded before): the payload's size and its
   * first PREVIEW_BYTES bytes, so an operator can compare it with the first write's.
   */
  payload_size?: number;
  payload_preview?: Buffer | Binary;
}

/** Bytes of a mismatching write's payload kept with its record (its hash covers the whole payload). */
export const PREVIEW_BYTES = 256;
/** Mismatching writes GetEntry lists per entry, oldest first (the count says how many there were). */
export const MISMATCH_WRITES_LISTED = 20;

/** Per-entry counts of the writes that hit it. */
export interface DuplicateCounts {
  duplicates: number;
  payloadMismatches: number;
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

/** Entries small enough to keep in the known-entries cache (the payload is part of the answer). */
const CACHEABLE_PAYLOAD_BYTES = 16 * 1024;
/** Payload bytes the cache may hold (plus the bookkeeping per entry, counted too). */
const CACHE_BUDGET_BYTES = 64 * 1024 * 1024;
// Measured, not guessed: a whole-call soak grew the ledger's RSS by ~3 KiB per cached
// entry (strings, Date, Buffer, Map slot); counting 1 KiB let the cache reach ~300 MiB.
const ENTRY_OVERHEAD_BYTES = 3 * 1024;
/** Most entries kept, whatever their size: retries are of recent effects. */
const CACHE_MAX_ENTRIES = 20_000;

export class EntryStore {
  /**
   * Entries this process has seen, by effect id. Entries are deleted only by a
   * retention an operator sets, past which a cached entry counts as unknown (see
   * {@link cached}), and their identity never changes, so a hit proves the effect
   * exists: a retry can be answered as a duplicate without attempting the insert.
   * A miss proves nothing and always goes to the unique insert.
   */
  private readonly known = new Map<string, EntryDoc>();
  private knownBytes = 0;
  /** KEYCAP_RETENTION_ENTRIES_SECONDS in ms; 0: entries are kept. */
  private entryRetentionMs = 0;
  /** Old entries retention found with an unfinished call: skipped until a sweep finds nothing else. */
  private readonly keptEntries = new Set<string>();
  /** Concurrent inserts into each collection share a command (group commit, ADR 0020). */
  private readonly claims: InsertBatcher<EntryDoc>;
  private readonly spends: InsertBatcher<CapabilityUseDoc>;
  private readonly duplicateRecords: InsertBatcher<DuplicateDoc>;
  /** Entries, duplicates and mismatches counted as they are written (GetStats reads these, never the collections). */
  readonly counters: StatsCounters;

  private constructor(
    private readonly entries: Collection<EntryDoc>,
    private readonly uses: Collection<CapabilityUseDoc>,
    private readonly duplicates: Collection<DuplicateDoc>,
    /** Queryable entries under the old `req:<tool>:<request>` ids exist (checked once at open). */
    readonly hasLegacyQueryable: boolean,
    counters: StatsCounters,
    private readonly marks: ListingMarks,
  ) {
    this.counters = counters;
    const batched = (collection: string) => ({
      writeConcern: { w: "majority" as const },
      unacknowledged: () => new Error(`${collection} insert was not acknowledged`),
    });
    this.claims = new InsertBatcher(entries, { ...batched("entries"), sizeOf: (d) => payloadSize(d.payload) + 1024 });
    this.spends = new InsertBatcher(uses, batched("capability_uses"));
    this.duplicateRecords = new InsertBatcher(duplicates, batched("entry_duplicates"));
  }

  /** Opens the collections and creates their indexes; a failure stops the start. */
  static async open(db: Db, logger?: Logger): Promise<EntryStore> {
    const entries = db.collection<EntryDoc>(LEDGER_ENTRIES);
    const uses = db.collection<CapabilityUseDoc>("capability_uses");
    const duplicates = db.collection<DuplicateDoc>("entry_duplicates");
    // One index per command: FerretDB v1.24 drops the connection when a multi-index
    // createIndexes names indexes that already exist (every restart would fail).
    await entries.createIndex({ entry_id: 1 }, { name: "entry_id_unique", unique: true });
    // Retention's oldest-first reads (ADR 0031); listings by time bucket (ADR 0033).
    await entries.createIndex({ recorded_at: -1, _id: -1 }, { name: "newest_first" });
    await createListingIndex(entries);
    await uses.createIndex({ expires_at: 1 }, { name: "expires_at" });
    await equalityIndex(duplicates, "effect_id", "effect_id");
    // New ids are `req:[`; a tool id never starts with "[", so this finds only old ones.
    const legacy = await entries.findOne({ effect: "queryable", _id: { $regex: /^req:[^[]/ } }, { projection: { _id: 1 } });
    const counters = StatsCounters.open(db, { kind: "entries", service: "ledger", logger: logger ?? silentLogger });
    return new EntryStore(entries, uses, duplicates, legacy !== null, counters, await ListingMarks.open(db));
  }

  /**
   * Claims an effect with one insert.
   * @returns false when an entry with that `_id` already exists (nothing was written).
   */
  async insert(doc: EntryDoc): Promise<boolean> {
    doc.lb = listingBucketOf(doc.recorded_at);
    try {
      // Its listings' marks first: a written entry is always listed (ADR 0033).
      await this.marks.ensure("entries", doc.recorded_at, scopesOf({ tool: doc.tool_id }));
      await this.claims.insert(doc);
      this.counters.add("entries");
      this.remember(doc);
      return true;
    } catch (err) {
      if (isDuplicateKey(err)) return false;
      throw err;
    }
  }

  /** True when this process knows the effect exists (see `known`); false proves nothing. */
  knownToExist(effectId: string): boolean {
    return this.cached(effectId) !== undefined;
  }

  /**
   * Entries older than KEYCAP_RETENTION_ENTRIES_SECONDS may be removed by the sweeper of any
   * replica: from then on this one treats its cached copy as unknown (the insert decides).
   */
  setEntryRetention(seconds: number): void {
    this.entryRetentionMs = seconds * 1000;
  }

  /** The cached entry, unless retention may have removed it. */
  private cached(effectId: string): EntryDoc | undefined {
    const doc = this.known.get(effectId);
    if (doc && this.entryRetentionMs > 0 && doc.recorded_at.getTime() < Date.now() - this.entryRetentionMs) {
      this.forget(effectId);
      return undefined;
    }
    return doc;
  }

  /**
   * Records a write that hit an existing entry, and returns that entry. One
   * read (skipped when the entry is known here) and one insert; the entry is
   * updated only the first time a payload differs, to flag it.
   */
  async recordDuplicate(
    effectId: string,
    write: { toolId: string; callId: string; attempt: number; capabilityId: string; payloadSha256: string; payload: Uint8Array },
  ): Promise<{ entry: EntryDoc; payloadMismatch: boolean }> {
    let entry = this.cached(effectId) ?? (await this.entries.findOne({ _id: effectId }));
    // The insert's collision means it exists (unless retention removed it just now: then the write fails, and its retry is a new effect).
    if (!entry) throw new Error(`entry ${effectId} collided on insert but cannot be found`);
    this.remember(entry);
    const payloadMismatch = entry.payload_sha256 !== write.payloadSha256;
    await this.duplicateRecords.insert({
      _id: `${effectId}#${randomUUID()}`,
      effect_id: effectId,
      tool_id: write.toolId,
      call_id: write.callId,
      attempt: write.attempt,
      capability_id: write.capabilityId,
      payload_sha256: write.payloadSha256,
      payload_mismatch: payloadMismatch,
      at: new Date(),
      // A copy: the write's payload is a view into a socket chunk (see cachedCopy).
      ...(payloadMismatch ? { payload_size: write.payload.length, payload_preview: Buffer.from(write.payload.subarray(0, PREVIEW_BYTES)) } : {}),
    });
    this.counters.add("duplicates");
    if (payloadMismatch) this.counters.add("payload_mismatches");
    if (payloadMismatch && !entry.payload_mismatch) {
      await this.entries.updateOne({ _id: effectId }, { $set: { payload_mismatch: true } });
      entry = { ...entry, payload_mismatch: true };
      this.remember(entry);
    }
    return { entry, payloadMismatch };
  }

  /**
   * Duplicate and mismatch counts of the given entries (for the admin API): one equality count
   * per entry on the `eq_effect_id` index (FerretDB pushes no `$in` down), mismatches only for
   * entries flagged.
   */
  async countsFor(entries: readonly Pick<EntryDoc, "_id" | "payload_mismatch">[], maxTimeMS?: number): Promise<Map<string, DuplicateCounts>> {
    const counted = await Promise.all(
      entries.map(async (e): Promise<[string, DuplicateCounts]> => {
        const [duplicates, payloadMismatches] = await Promise.all([
          this.duplicates.countDocuments({ effect_id: e._id }, { maxTimeMS }),
          e.payload_mismatch ? this.duplicates.countDocuments({ effect_id: e._id, payload_mismatch: true }, { maxTimeMS }) : 0,
        ]);
        return [e._id, { duplicates, payloadMismatches }];
      }),
    );
    return new Map(counted);
  }

  /** Drops an entry from the known-entries cache (retention removed it). */
  private forget(effectId: string): void {
    const doc = this.known.get(effectId);
    if (!doc) return;
    this.known.delete(effectId);
    this.knownBytes -= payloadSize(doc.payload) + ENTRY_OVERHEAD_BYTES;
  }

  /**
   * The writes under an entry whose payload differed from the first, oldest first, at most
   * MISMATCH_WRITES_LISTED: an equality read on the `effect_id` index, for an operator.
   */
  async mismatchingWrites(effectId: string, maxTimeMS?: number): Promise<DuplicateDoc[]> {
    return this.duplicates.find({ effect_id: effectId, payload_mismatch: true }, { maxTimeMS }).sort({ at: 1, _id: 1 }).limit(MISMATCH_WRITES_LISTED).toArray();
  }

  /**
   * Keeps the entry as most recently used. Bounded by bytes, not by count: a retry
   * storm after an outage replays recent keys, and on FerretDB v1.24 a read by `_id`
   * scans the table (docs/decisions/0007), so every hit saves a read that grows with
   * the ledger. A miss only costs that read; it never changes the outcome.
   */
  private remember(doc: EntryDoc): void {
    const size = payloadSize(doc.payload);
    if (size > CACHEABLE_PAYLOAD_BYTES) return;
    const previous = this.known.get(doc._id);
    if (previous) {
      this.known.delete(doc._id);
      this.knownBytes -= payloadSize(previous.payload) + ENTRY_OVERHEAD_BYTES;
    }
    this.known.set(doc._id, cachedCopy(doc));
    this.knownBytes += size + ENTRY_OVERHEAD_BYTES;
    for (const [id, old] of this.known) {
      if (this.knownBytes <= CACHE_BUDGET_BYTES && this.known.size <= CACHE_MAX_ENTRIES) break;
      this.known.delete(id);
      this.knownBytes -= payloadSize(old.payload) + ENTRY_OVERHEAD_BYTES;
    }
  }

  /**
   * Spends a single-use capability id.
   * @returns false when it was spent before.
   */
  async spendCapability(jti: string, toolId: string, expiresAt: Date): Promise<boolean> {
    try {
      await this.spends.insert({ _id: jti, tool_id: toolId, used_at: new Date(), expires_at: expiresAt });
      return true;
    } catch (err) {
      if (isDuplicateKey(err)) return false;
      throw err;
    }
  }

  /**
   * Retention (ADR 0031): forgets up to `limit` spent capability ids whose record expired before
   * `before`. A record expires at the capability's `exp` plus the clock tolerance, when the
   * capability can no longer verify, so a replay of it is refused as expired anyway.
   */
  expireSpentCapabilities(before: Date, limit: number): Promise<number> {
    return deleteBatch(this.uses, { expires_at: { $lt: before } }, limit);
  }

  /**
   * Retention of entries, only when an operator sets one (KEYCAP_RETENTION_ENTRIES_SECONDS):
   * removes up to `limit` entries recorded before `before`, with their duplicate records,
   * except entries that unfinished calls still need (`unfinished` says which, by entry id):
   * recovery of such a call asks whether its effect happened. After removal the same key is a
   * new effect.
   */
  async expireEntries(
    before: Date,
    limit: number,
    unfinished: (entries: Pick<EntryDoc, "_id" | "call_id" | "key" | "request_id">[]) => Promise<Set<string>>,
  ): Promise<number> {
    const old = await this.entries
      .find({ recorded_at: { $lt: before }, _id: { $nin: [...this.keptEntries] } }, { projection: { _id: 1, call_id: 1, key: 1, request_id: 1 } })
      .limit(limit)
      .toArray();
    if (old.length === 0) this.keptEntries.clear();
    const busy = await unfinished(old);
    const ids: string[] = [];
    for (const e of old) {
      if (!busy.has(e._id)) ids.push(e._id);
      else if (this.keptEntries.size < 1000) this.keptEntries.add(e._id);
    }
    if (ids.length === 0) return 0;
    // The duplicate records first: an entry whose records are gone is still an entry.
    await this.duplicates.deleteMany({ effect_id: { $in: ids } });
    const res = await this.entries.deleteMany({ _id: { $in: ids }, recorded_at: { $lt: before } });
    for (const id of ids) this.forget(id);
    return res.deletedCount;
  }

  /** @param maxTimeMS the database-side time limit of an operator read. */
  async findByEffectId(effectId: string, maxTimeMS?: number): Promise<EntryDoc | null> {
    return this.entries.findOne({ _id: effectId }, { maxTimeMS });
  }

  async findByEntryId(entryId: string, maxTimeMS?: number): Promise<EntryDoc | null> {
    return this.entries.findOne({ entry_id: entryId }, { maxTimeMS });
  }

  /** Newest first, `limit` documents after `cursor`, read by time bucket (ADR 0033); `maxTimeMS` bounds the whole page. */
  async list(toolId: string, cursor: EntryCursor | undefined, limit: number, maxTimeMS: number): Promise<EntryDoc[]> {
    return listNewestFirst(this.marks, this.entries, {
      name: "entries",
      scope: toolId ? { scope: "tool", value: toolId } : { scope: "all", value: "" },
      timeField: "recorded_at",
      filter: toolId ? { tool_id: toolId } : {},
      after: cursor ? { at: cursor.recordedAt, id: cursor.id } : undefined,
      limit,
      maxTimeMS,
    });
  }

  /** Writes the pending counts and stops counting (the ledger's stop). */
  close(): Promise<void> {
    return this.counters.close();
  }
}

/**
 * The entry as the known-entries cache keeps it: with a payload of its own. A payload
 * decoded from a gRPC request is a view into the socket chunk it arrived in, which holds
 * many other requests (up to 64 KiB); caching the view kept every such chunk alive, and the
 * ledger's RSS grew by ~5 KiB per call over a whole-call soak (bench/README.md).
 */
export function cachedCopy(doc: EntryDoc): EntryDoc {
  return { ...doc, payload: Buffer.from(payloadBuffer(doc.payload)) };
}

function payloadSize(p: Buffer | Binary): number {
  return Buffer.isBuffer(p) ? p.length : p.position;
}

/** The stored payload as a Buffer (the driver reads BSON binary back as Binary). */
export function payloadBuffer(p: Buffer | Binary): Buffer {
  if (Buffer.isBuffer(p)) return p;
  const bytes = p.buffer;
  return Buffer.from(bytes.buffer, bytes.byteOffset, p.position);
}

const silentLogger: Logger = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {}, child: () => silentLogger };

/**
 * A single-field index for equality reads, named `eq_<field>` so that on FerretDB/PostgreSQL it
 * gets a GIN twin (ADR 0033). An index of the same key under its old name is replaced (MongoDB
 * refuses one key under two names).
 */
async function equalityIndex<T extends Document>(coll: Collection<T>, field: string, oldName: string): Promise<void> {
  const names = (await indexesOf(coll)).map((i) => String(i["name"]));
  if (names.includes(oldName)) await coll.dropIndex(oldName);
  await coll.createIndex({ [field]: 1 } as IndexSpecification, { name: `eq_${field}` });
}
