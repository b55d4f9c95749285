/**
 * Time buckets of the operator listings (ADR 0033): what a listed record carries (`lb`) and
 * which directory marks say its buckets are non-empty. Pure: the same format is written by
 * the Python and Go refusal recorders and checked against test/vectors/time-buckets.json.
 */

/** Levels of the directory, coarsest first, and the UTC digits each bucket keeps. */
export const LEVELS = [
  { level: "d", digits: 8 },
  { level: "h", digits: 10 },
  { level: "m", digits: 12 },
  { level: "s", digits: 14 },
] as const;

export type Level = (typeof LEVELS)[number]["level"];

/** `YYYYMMDDHHmmss` of a time, UTC (the second bucket; every coarser bucket is a prefix). */
export function secondBucket(at: Date): string {
  // Every write of a busy service asks for the current second: the last one is remembered.
  const second = Math.floor(at.getTime() / 1000);
  if (second === lastSecond.at) return lastSecond.bucket;
  const iso = at.toISOString(); // YYYY-MM-DDTHH:mm:ss.sssZ, always UTC
  const bucket = iso.slice(0, 4) + iso.slice(5, 7) + iso.slice(8, 10) + iso.slice(11, 13) + iso.slice(14, 16) + iso.slice(17, 19);
  lastSecond = { at: second, bucket };
  return bucket;
}

let lastSecond = { at: Number.NaN, bucket: "" };

/** The start of a bucket of any level (a prefix of a second bucket). */
export function bucketStart(bucket: string): Date {
  const d = (from: number, len: number, def: number): number => (bucket.length >= from + len ? Number(bucket.slice(from, from + len)) : def);
  return new Date(Date.UTC(d(0, 4, 1970), d(4, 2, 1) - 1, d(6, 2, 1), d(8, 2, 0), d(10, 2, 0), d(12, 2, 0)));
}

/** One listing a record belongs to: `all` (value "") or a filter and its value. */
export interface Scope {
  scope: string;
  value: string;
}

/** A directory mark, as stored in `listing_marks`. */
export interface MarkDoc {
  _id: string;
  up: string;
  coll: string;
  scope: string;
  level: Level;
  at: Date;
}

/** The `_id` of a mark; the value goes last, so it may contain any character. */
export function markId(coll: string, scope: Scope, level: Level | "r", bucket: string): string {
  return `${coll}/${scope.scope}/${level}/${bucket}/${scope.value}`;
}

/** The root of a listing: its children are the days that have records. */
export function rootId(coll: string, scope: Scope): string {
  return markId(coll, scope, "r", "");
}

/** The bucket a mark id names (ids are built by markId; the value after it is free text). */
export function bucketOfMarkId(id: string, coll: string, scope: Scope): string {
  // `${coll}/${scope}/${level}/` is fixed, the bucket is digits, then `/value`.
  const rest = id.slice(coll.length + scope.scope.length + 4);
  return rest.slice(0, rest.indexOf("/"));
}

/** Every mark a record listed at `at` needs, for each of its scopes, coarsest first. */
export function marksFor(coll: string, at: Date, scopes: readonly Scope[]): MarkDoc[] {
  const second = secondBucket(at);
  const out: MarkDoc[] = [];
  for (const scope of scopes) {
    let up = rootId(coll, scope);
    for (const { level, digits } of LEVELS) {
      const bucket = second.slice(0, digits);
      const id = markId(coll, scope, level, bucket);
      out.push({ _id: id, up, coll, scope: scope.scope, level, at: bucketStart(bucket) });
      up = id;
    }
  }
  return out;
}

/** The scopes of a record: `all`, then each named filter whose value is not empty. */
export function scopesOf(filters: Record<string, string | undefined>): Scope[] {
  const out: Scope[] = [{ scope: "all", value: "" }];
  for (const [scope, value] of Object.entries(filters)) if (value) out.push({ scope, value });
  return out;
}
