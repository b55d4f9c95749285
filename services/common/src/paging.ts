import type { Filter } from "mongodb";
import { invalidArgument } from "./errors";

/** page_size: 0 means the default, larger than max is capped. */
export function pageSize(requested: number, def = 100, max = 1000): number {
  if (!requested) return def;
  return Math.min(requested, max);
}

/** Page tokens are opaque to clients: base64url JSON of a cursor. */
export function encodePageToken(cursor: Record<string, string | number>): string {
  return Buffer.from(JSON.stringify(cursor), "utf8").toString("base64url");
}

/** Decodes a page token, refusing a forged or damaged one with INVALID_ARGUMENT. */
export function decodePageToken<K extends string>(token: string, keys: readonly K[]): Record<K, string | number> | undefined {
  if (token === "") return undefined;
  try {
    const parsed = JSON.parse(Buffer.from(token, "base64url").toString("utf8")) as Record<string, unknown>;
    const out = {} as Record<K, string | number>;
    for (const k of keys) {
      const v = parsed[k];
      if (typeof v !== "string" && typeof v !== "number") throw new Error(`missing ${k}`);
      out[k] = v;
    }
    return out;
  } catch {
    throw invalidArgument("INVALID_PAGE_TOKEN", "page_token is not a token this service issued", { field: "page_token" });
  }
}

/**
 * The keyset condition "after (at, id) in the listing's order" on `timeField`
 * then `_id`: pages neither skip nor repeat documents that tie on time, and a
 * page costs the same however deep it is.
 */
export function afterKeyset<T>(timeField: string, at: Date, id: string, order: "oldest-first" | "newest-first"): Filter<T>[] {
  const op = order === "oldest-first" ? "$gt" : "$lt";
  return [{ [timeField]: { [op]: at } } as Filter<T>, { [timeField]: at, _id: { [op]: id } } as Filter<T>];
}
