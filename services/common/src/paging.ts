import type { Filter } from "mongodb";
import { Reasons, refuse } from "./refuse";

/** page_size: 0 means the default, larger than max is capped. */
export function pageSize(requested: number, def = 100, max = 1000): number {
  if (!requested) return def;
  return Math.min(requested, max);
}

/** Page tokens are opaque to clients: base64url JSON of a cursor. */
export function encodePageToken(cursor: Record<string, string | number>): string {
  return Buffer.from(JSON.stringify(cursor), "utf8").toString("base64url");
}

/** What a cursor member must be: a time (ms since the epoch, a valid Date) or an id. */
export type CursorField = "time" | "id";

type CursorOf<S extends Record<string, CursorField>> = { [K in keyof S]: S[K] extends "time" ? number : string };

const MAX_TIME_MS = 8.64e15; // the largest time a JavaScript Date can hold
const MAX_ID_CHARS = 1024;

function pageTokenError(): Error {
  return refuse(Reasons.INVALID_PAGE_TOKEN, "page_token is not a token this service issued (pass the next_page_token of the previous page unchanged)", {
    field: "page_token",
  });
}

/**
 * Decodes a page token, refusing a forged or damaged one with INVALID_ARGUMENT: exactly
 * the members of `spec`, times as whole milliseconds a Date can hold, ids as non-empty
 * strings of bounded length. (`{"t":"x"}`, 1e300 or a year-300000 time are refused, not
 * turned into arbitrary pages.)
 */
export function decodePageToken<S extends Record<string, CursorField>>(token: string, spec: S): CursorOf<S> | undefined {
  if (token === "") return undefined;
  if (token.length > 4 * MAX_ID_CHARS || !/^[A-Za-z0-9_-]+$/.test(token)) throw pageTokenError();
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(token, "base64url").toString("utf8"));
  } catch {
    throw pageTokenError();
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw pageTokenError();
  const record = parsed as Record<string, unknown>;
  if (Object.keys(record).length !== Object.keys(spec).length) throw pageTokenError();
  const out: Record<string, string | number> = {};
  for (const [k, kind] of Object.entries(spec)) {
    const v = record[k];
    if (kind === "time") {
      if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0 || v > MAX_TIME_MS) throw pageTokenError();
    } else if (typeof v !== "string" || v === "" || v.length > MAX_ID_CHARS) {
      throw pageTokenError();
    }
    out[k] = v;
  }
  return out as CursorOf<S>;
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
