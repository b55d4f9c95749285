/**
 * Operator listings by time bucket (ADR 0033): writers mark the buckets a record falls in
 * before writing it (`ListingMarks.ensure`), and a newest-first page walks the marks and
 * reads one second's records at a time, every read an equality FerretDB pushes down to an
 * index. Nothing here reads a collection in proportion to its size.
 */
import type { Collection, Db, Document, Filter } from "mongodb";
import { bucketOfMarkId, LEVELS, markId, marksFor, rootId, secondBucket, type MarkDoc, type Scope } from "./domain/time-buckets";
import { isDuplicateKey, queryTimeLimitRefusal } from "./mongo";

export { scopesOf, type Scope } from "./domain/time-buckets";

/** Mark ids one process remembers having written; past this the memory starts over (a repeat insert is harmless). */
const MEMO_MAX = 50_000;
/** (Collection, second, scopes) sets remembered; a repeat after the memory starts over builds its marks again. */
const RECENT_MAX = 4_096;
/** Most seconds read at once while filling a page: one first (a busy second fills a page alone), then twice as many each round. */
const SECONDS_IN_FLIGHT = 8;

/** The `lb` field of a record listed at `at`. */
export const listingBucketOf = secondBucket;

/** The field and index every listed collection has (ADR 0033). */
export async function createListingIndex<T extends Document>(coll: Collection<T>): Promise<void> {
  await coll.createIndex({ lb: 1 }, { name: "eq_lb" });
}

/** The directory of non-empty buckets (`listing_marks`), shared by every listed collection. */
export class ListingMarks {
  private readonly written = new Map<string, Promise<void>>();
  /** The wait of each (collection, second, scopes) asked for lately. */
  private readonly recent = new Map<string, Promise<void>>();

  private constructor(private readonly marks: Collection<MarkDoc>) {}

  static async open(db: Db): Promise<ListingMarks> {
    const marks = db.collection<MarkDoc>("listing_marks");
    await marks.createIndex({ up: 1 }, { name: "eq_up" });
    return new ListingMarks(marks);
  }

  /**
   * Writes the marks a record listed at `at` needs, before the record: a listed record always
   * has them. Once per process and mark; concurrent writers of one bucket share one insert.
   */
  ensure(coll: string, at: Date, scopes: readonly Scope[]): Promise<void> {
    // A busy writer lists hundreds of records a second under the same few scopes: those after
    // the first of a second share its wait without building its marks again.
    let key = `${coll}\u0000${Math.floor(at.getTime() / 1000)}`;
    for (const s of scopes) key += `\u0000${s.scope}\u0001${s.value}`;
    const same = this.recent.get(key);
    if (same) return same;
    if (this.recent.size >= RECENT_MAX) this.recent.clear();
    const wait = this.ensureMarks(coll, at, scopes);
    this.recent.set(key, wait);
    wait.catch(() => {
      if (this.recent.get(key) === wait) this.recent.delete(key);
    });
    return wait;
  }

  private ensureMarks(coll: string, at: Date, scopes: readonly Scope[]): Promise<void> {
    const waits: Promise<void>[] = [];
    const missing: MarkDoc[] = [];
    for (const m of marksFor(coll, at, scopes)) {
      const known = this.written.get(m._id);
      if (known) waits.push(known);
      else missing.push(m);
    }
    if (missing.length > 0) {
      if (this.written.size + missing.length > MEMO_MAX) this.written.clear();
      const insert = this.insert(missing);
      for (const m of missing) this.written.set(m._id, insert);
      // A failed insert is not remembered: the next record tries again.
      insert.catch(() => {
        for (const m of missing) if (this.written.get(m._id) === insert) this.written.delete(m._id);
      });
      waits.push(insert);
    }
    return waits.length === 1 ? waits[0]! : Promise.all(waits).then(() => undefined);
  }

  private async insert(docs: MarkDoc[]): Promise<void> {
    try {
      await this.marks.insertMany(docs, { ordered: false });
    } catch (err) {
      const writeErrors = (err as { writeErrors?: unknown }).writeErrors;
      const all = Array.isArray(writeErrors) ? writeErrors : writeErrors ? [writeErrors] : [];
      // Marks another process (or an earlier run) wrote already: exactly what is wanted.
      if (isDuplicateKey(err) && all.every((e) => isDuplicateKey(e))) return;
      throw err;
    }
  }

  /** The buckets under a mark (at most 60, one equality read), newest first. */
  async children(coll: string, scope: Scope, parent: string, maxTimeMS: number): Promise<string[]> {
    const docs = await this.marks.find({ up: parent }, { projection: { _id: 1 }, maxTimeMS }).toArray();
    return docs.map((d) => bucketOfMarkId(d._id, coll, scope)).sort((a, b) => (a < b ? 1 : a > b ? -1 : 0));
  }

  /**
   * See {@link sweepBucketsBefore}. `seen` collects, per level below the root, the listings
   * (other than `all`) whose marks the swept records had, so their emptied parents go too.
   */
  async sweep<T extends { _id: string }>(coll: Collection<T>, s: BucketSweep<T>): Promise<number> {
    const all: Scope = { scope: "all", value: "" };
    const last = secondBucket(s.before);
    let removed = 0;
    const projection = Object.fromEntries(s.fields.map((f) => [f, 1]));
    // Returns true when the node has no children left (so it may go).
    const walk = async (parent: string, depth: number, seen: Map<string, Scope>): Promise<boolean> => {
      const { level, digits } = LEVELS[depth]!;
      const children = (await this.children(s.name, all, parent, 0)).reverse(); // oldest first
      let left = children.length;
      for (const bucket of children) {
        // Past the cutoff's bucket: stop; at it, go in (its older part may go) but it stays.
        if (removed >= s.limit || bucket > last.slice(0, digits) || (depth === LEVELS.length - 1 && bucket === last)) return false;
        const inner = new Map<string, Scope>();
        let cleared: boolean;
        if (depth === LEVELS.length - 1) {
          const r = await this.sweepSecond(coll, s, bucket, projection, inner);
          removed += r.removed;
          cleared = r.cleared;
        } else cleared = await walk(markId(s.name, all, level, bucket), depth + 1, inner);
        for (const [k, v] of inner) seen.set(k, v);
        if (!cleared) return false;
        // The node in every listing its records were in, once nothing is under it.
        await Promise.all(
          [all, ...inner.values()].map(async (scope) => {
            const id = markId(s.name, scope, level, bucket);
            if (depth === LEVELS.length - 1 || (await this.marks.findOne({ up: id }, { projection: { _id: 1 } })) === null)
              await this.marks.deleteOne({ _id: id });
          }),
        );
        left -= 1;
      }
      return left === 0;
    };
    await walk(rootId(s.name, all), 0, new Map());
    return removed;
  }

  /** Removes one second's records; notes the listings they were in. */
  private async sweepSecond<T extends { _id: string }>(
    coll: Collection<T>,
    s: BucketSweep<T>,
    second: string,
    projection: Document,
    seen: Map<string, Scope>,
  ): Promise<{ removed: number; cleared: boolean }> {
    const docs = (await coll.find({ lb: second } as unknown as Filter<T>, { projection }).toArray()) as T[];
    if (docs.length === 0) return { removed: 0, cleared: true };
    for (const d of docs) for (const scope of s.scopes(d)) if (scope.scope !== "all") seen.set(`${scope.scope}/${scope.value}`, scope);
    if (s.remove) return s.remove(second, docs);
    const res = await coll.deleteMany({ lb: second } as unknown as Filter<T>, { writeConcern: { w: "majority" } });
    return { removed: res.deletedCount, cleared: true };
  }

  /**
   * The seconds that have records in a listing, newest first, from `hi` down to `lo`
   * (inclusive second buckets; either may be absent). Lazy: a page reads only as far as it needs.
   */
  async *secondsNewestFirst(coll: string, scope: Scope, hi: string | undefined, lo: string | undefined, maxTimeMS: number): AsyncGenerator<string> {
    const walk = async function* (this: ListingMarks, parent: string, depth: number): AsyncGenerator<string> {
      const { level, digits } = LEVELS[depth]!;
      for (const bucket of await this.children(coll, scope, parent, maxTimeMS)) {
        if (hi !== undefined && bucket > hi.slice(0, digits)) continue;
        if (lo !== undefined && bucket < lo.slice(0, digits)) return;
        if (depth === LEVELS.length - 1) yield bucket;
        else yield* walk.call(this, markId(coll, scope, level, bucket), depth + 1);
      }
    };
    yield* walk.call(this, rootId(coll, scope), 0);
  }
}

/** What a newest-first page is of, and where it starts. */
export interface NewestFirstQuery<T> {
  /** The collection's name, as marks name it. */
  name: string;
  /** The listing to walk: `all`, or the most selective filter given. */
  scope: Scope;
  /** The time a record is listed by (its `lb` is that time's second). */
  timeField: keyof T & string;
  /** Further equality filters, read by the database within each second. */
  filter: Filter<T>;
  /** The last record of the previous page. */
  after?: { at: Date; id: string };
  /** Records at or after `since`, before `until`. */
  since?: Date;
  until?: Date;
  limit: number;
  /** The whole page's time limit: each read carries the rest of it to the database. */
  maxTimeMS: number;
}

/** A page of records, newest first by (time, `_id`), read second by second. */
export async function listNewestFirst<T extends { _id: string }>(marks: ListingMarks, coll: Collection<T>, q: NewestFirstQuery<T>): Promise<T[]> {
  const deadline = Date.now() + q.maxTimeMS;
  const left = (): number => {
    const ms = deadline - Date.now();
    if (ms <= 0) throw queryTimeLimitRefusal();
    return ms;
  };
  const timeOf = (d: T): number => (d[q.timeField] as unknown as Date).getTime();
  // (time, id) strictly before the cursor, inside [since, until).
  const keep = (d: T): boolean => {
    const t = timeOf(d);
    if (q.since && t < q.since.getTime()) return false;
    if (q.until && t >= q.until.getTime()) return false;
    if (q.after) {
      const c = q.after.at.getTime();
      if (t > c || (t === c && d._id >= q.after.id)) return false;
    }
    return true;
  };
  const hiTime = [q.after?.at, q.until].filter((d): d is Date => d !== undefined).map((d) => d.getTime());
  const hi = hiTime.length > 0 ? secondBucket(new Date(Math.min(...hiTime))) : undefined;
  const lo = q.since ? secondBucket(q.since) : undefined;
  const seconds = marks.secondsNewestFirst(q.name, q.scope, hi, lo, left());
  const out: T[] = [];
  for (let width = 1; ; width = Math.min(width * 2, SECONDS_IN_FLIGHT)) {
    const batch: string[] = [];
    while (batch.length < width) {
      const next = await seconds.next();
      if (next.done) break;
      batch.push(next.value);
    }
    if (batch.length === 0) return out;
    const pages = await Promise.all(batch.map((lb) => coll.find({ ...q.filter, lb } as Filter<T>, { maxTimeMS: left() }).toArray()));
    for (const docs of pages) {
      const sorted = (docs as T[]).filter(keep).sort((a, b) => timeOf(b) - timeOf(a) || (a._id < b._id ? 1 : a._id > b._id ? -1 : 0));
      for (const d of sorted) {
        out.push(d);
        if (out.length >= q.limit) {
          await seconds.return(undefined);
          return out;
        }
      }
    }
  }
}

/** What a sweep by bucket removes: a listed collection's records of whole seconds before a cutoff. */
export interface BucketSweep<T> {
  /** The collection's name, as marks name it. */
  name: string;
  /** Records listed in a second before this time (whole seconds only) go. */
  before: Date;
  /** About how many records one sweep removes (it finishes the second it is in). */
  limit: number;
  /** The listings a record is in (its marks), read from the fields `fields` names. */
  scopes: (doc: T) => Scope[];
  fields: readonly (keyof T & string)[];
  /**
   * Removes one second's records (default: all of them by `lb`) and says whether the second is
   * empty now; a second not cleared stops the sweep there (its marks stay) until a later one.
   */
  remove?: (second: string, docs: readonly T[]) => Promise<{ removed: number; cleared: boolean }>;
}

/**
 * Retention by bucket (ADR 0033): walks the `all` listing oldest first and removes each
 * second before the cutoff by equality on `lb` (FerretDB pushes no range down, so a range
 * delete would read the whole collection every sweep), then that second's marks in every
 * listing its records were in, and each minute, hour and day mark left without children.
 * Only buckets wholly before the cutoff are touched: no writer marks them any more.
 * @returns how many records were removed.
 */
export async function sweepBucketsBefore<T extends { _id: string }>(marks: ListingMarks, coll: Collection<T>, s: BucketSweep<T>): Promise<number> {
  return marks.sweep(coll, s);
}
