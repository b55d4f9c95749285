/**
 * RFC 6901 JSON Pointers, as keycap uses them to name argument fields.
 *
 * One deliberate departure: the empty pointer "" (the whole document) is
 * refused. A key derived from the whole arguments object would change with
 * every volatile member (a timestamp, a trace id) and so would not identify
 * the effect; a derivation must name the members that do.
 */
import type { JsonValue } from "./strict-json";
import { Reasons, refuse } from "../refuse";

// After "~", RFC 6901 allows only "0" (for "~") and "1" (for "/").
const BAD_TILDE = /~(?![01])/;
const LONE_SURROGATE = /[\uD800-\uDFFF]/u;
const ARRAY_INDEX = /^(?:0|[1-9][0-9]*)$/;

/**
 * Splits a JSON Pointer into its unescaped reference tokens.
 *
 * @throws KeycapError reason `INVALID_JSON_POINTER` for "" (refused by keycap),
 *   a pointer not starting with "/", a "~" not followed by "0" or "1", or a
 *   pointer that is not well-formed Unicode (it could never match a member).
 *
 * @example parseJsonPointer("/items/0/sku") // ["items", "0", "sku"]
 * @example parseJsonPointer("/a~1b/c~0d")  // ["a/b", "c~d"]
 */
export function parseJsonPointer(pointer: string): string[] {
  if (pointer === "") {
    throw refuse(Reasons.INVALID_JSON_POINTER, 'JSON pointer "" names the whole arguments document; a key field must name a member (e.g. "/order_id")', {
      pointer,
    });
  }
  if (!pointer.startsWith("/")) {
    throw refuse(Reasons.INVALID_JSON_POINTER, `JSON pointer ${JSON.stringify(pointer)} must start with "/" (RFC 6901)`, { pointer });
  }
  if (BAD_TILDE.test(pointer)) {
    throw refuse(Reasons.INVALID_JSON_POINTER, `JSON pointer ${JSON.stringify(pointer)} has a "~" not followed by "0" or "1" (RFC 6901 §3)`, { pointer });
  }
  if (LONE_SURROGATE.test(pointer)) {
    throw refuse(Reasons.INVALID_JSON_POINTER, `JSON pointer ${JSON.stringify(pointer)} contains a lone surrogate; it must be well-formed Unicode`, {
      pointer,
    });
  }
  // "~1" is decoded before "~0" so that "~01" becomes "~1", not "/" (RFC 6901 §4).
  return pointer
    .slice(1)
    .split("/")
    .map((token) => token.replace(/~1/g, "/").replace(/~0/g, "~"));
}

/**
 * Joins reference tokens into a JSON Pointer; the inverse of {@link parseJsonPointer}.
 * No tokens gives "" (the whole document), which this function allows because
 * it also formats the location of errors at the top level.
 */
export function formatJsonPointer(tokens: readonly string[]): string {
  let out = "";
  for (const token of tokens) {
    out += "/" + (token.includes("~") || token.includes("/") ? token.replace(/~/g, "~0").replace(/\//g, "~1") : token);
  }
  return out;
}

/**
 * Finds the value a pointer names, or `undefined` when there is none.
 *
 * Object members are matched as own properties only (so "/constructor" does
 * not find Object.prototype.constructor). An array token must be a decimal
 * index without leading zeros inside the array; "-" (RFC 6901's "past the
 * end") names no value and resolves to `undefined`.
 */
export function resolveJsonPointer(value: JsonValue, tokens: readonly string[]): JsonValue | undefined {
  let current: JsonValue = value;
  for (const token of tokens) {
    if (current === null || typeof current !== "object") return undefined;
    if (Array.isArray(current)) {
      if (!ARRAY_INDEX.test(token)) return undefined;
      const index = Number(token);
      if (index >= current.length) return undefined;
      current = current[index] as JsonValue;
    } else {
      if (!Object.hasOwn(current, token)) return undefined;
      current = current[token] as JsonValue;
    }
  }
  return current;
}
