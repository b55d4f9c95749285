/**
 * keycap's idempotency-key scheme, version 1 ("keycap/idempotency-key/v1").
 *
 *   key = base64url_nopad( SHA-256( UTF-8("keycap/idempotency-key/v1") ‖ 0x00 ‖ UTF-8(JCS(doc)) ) )
 *
 *   doc = {
 *     "tool_id":            <tool id, a string>,
 *     "derivation_version": <the derivation's version, an integer ≥ 1>,
 *     "fields":             { "<pointer>": <value at pointer>, ... }   // one member per named field
 *     "context":            { "run_id": <run id> }                       // only the named context fields; {} when none
 *   }
 *
 * JCS is the JSON Canonicalization Scheme, RFC 8785: members sorted by UTF-16
 * code units, no whitespace, numbers in ECMAScript shortest round-trip form
 * (so 1, 1.0 and 1e0 are one value, and -0 is 0), strings minimally escaped and
 * never Unicode-normalised (so NFC and NFD spellings are different keys).
 * The domain tag and the NUL separator keep these digests apart from any other
 * SHA-256 use of the same bytes; the tool id and version inside the canonical
 * document keep keys of different tools, and of a tool's successive
 * derivations, apart.
 *
 * Only what the derivation names enters the key: arguments it does not name
 * (a `requested_at`, a trace id) never change it, and nothing from the process
 * (clock, counter, random id, host, map iteration order) is read here.
 *
 * Input that would make two different calls share a key is refused instead:
 * a named field that is missing, null, or holds an integer beyond ±(2^53-1)
 * (it was rounded when parsed); the parser already refused duplicates,
 * non-finite numbers and lone surrogates.
 *
 * Published vectors: test/vectors/key-derivation.json. The decision record is
 * docs/decisions/0002-key-derivation-scheme.md.
 */
import { createHash } from "node:crypto";
import canonicalize from "canonicalize";
import { invalidArgument, KeycapError } from "../errors";
import { parseJsonPointer, resolveJsonPointer } from "./json-pointer";
import type { ArgumentSchema } from "./argument-schema";
import type { JsonObject, JsonValue, ParsedArguments } from "./strict-json";
import { Reasons, refuse } from "../refuse";

/** The scheme's domain tag; hashed in front of every key's canonical document. */
export const KEY_SCHEME = "keycap/idempotency-key/v1";

/** Call-context fields a derivation may name. */
export type ContextField = "run_id";

/** The context fields that exist, for validating untyped (gRPC) input. */
export const CONTEXT_FIELDS: readonly ContextField[] = ["run_id"];

/** How an Idempotent tool's key is derived from a call (the `key` of its effect class). */
export interface KeyDerivationSpec {
  /** RFC 6901 pointers into the arguments object, naming the fields that identify the effect. Order does not matter. */
  fields: readonly string[];
  /**
   * The derivation's version; bump it to give every call new keys. 0 is version 1:
   * it is what protobuf sends when the field is not set (see {@link derivationVersion}).
   */
  version: number;
  /** Fields of the call's context that also identify the effect; `["run_id"]` makes the same call in two runs two effects. */
  contextFields: readonly ContextField[];
}

/** What the runtime recorded about a call besides its arguments. */
export interface CallContext {
  /** The run the call belongs to, as passed to BeginCall. */
  runId: string;
}

/**
 * The version a derivation hashes: `version`, except 0 (protobuf's "not set"), which is 1.
 * The one place that rule lives; the kernel stores tools with this value.
 */
export function derivationVersion(spec: Pick<KeyDerivationSpec, "version">): number {
  return spec.version === 0 ? 1 : spec.version;
}

/** Longest accepted request id, in Unicode code points. */
export const MAX_REQUEST_ID_LENGTH = 256;

const DOMAIN_PREFIX = Buffer.concat([Buffer.from(KEY_SCHEME, "utf8"), Buffer.from([0x00])]);

/**
 * Checks a derivation at registration time, so that a tool which cannot derive
 * a stable key is refused before its first call rather than after a double effect.
 *
 * @param schema the tool's argument schema, when it registered one: every field
 *   must then be defined by it and none may be volatile.
 * @throws KeycapError reason `KEY_DERIVATION_NO_FIELDS`, `INVALID_JSON_POINTER`,
 *   `KEY_DERIVATION_DUPLICATE_FIELD`, `KEY_DERIVATION_BAD_VERSION`,
 *   `KEY_DERIVATION_BAD_CONTEXT_FIELD`, `KEY_FIELD_NOT_IN_SCHEMA` or `KEY_FIELD_VOLATILE`.
 */
export function validateDerivation(spec: KeyDerivationSpec, schema?: ArgumentSchema): void {
  parseSpec(spec, schema);
}

/**
 * Derives a call's idempotency key (see the scheme at the top of this file).
 * The same tool, derivation and recorded arguments give the same key in any
 * process, after any restart.
 *
 * @throws KeycapError (INVALID_ARGUMENT) with the reasons of {@link validateDerivation}
 *   (a derivation is re-checked, never trusted), `TOOL_ID_REQUIRED`, and at call
 *   time `KEY_FIELD_MISSING`, `KEY_FIELD_NULL`, `KEY_FIELD_UNSAFE_INTEGER` or `RUN_ID_REQUIRED`.
 *
 * @example
 * const args = parseArguments('{"order_id":"A-17","requested_at":"2025-01-01T00:00:00Z"}');
 * deriveKey("payments.charge", { fields: ["/order_id"], version: 1, contextFields: ["run_id"] }, args, { runId: "run-1" });
 */
export function deriveKey(toolId: string, spec: KeyDerivationSpec, args: ParsedArguments, ctx: CallContext): string {
  const canonical = canonicalKeyDocument(toolId, spec, args, ctx);
  return createHash("sha256").update(DOMAIN_PREFIX).update(canonical, "utf8").digest("base64url");
}

/**
 * The derivation as a capability's `derivation` claim carries it (ADR 0026): the key's
 * canonical document without the field values. A sink holding the call's arguments
 * re-derives the key from it with {@link derivationOfClaim}.
 */
export function derivationClaim(spec: KeyDerivationSpec, ctx: CallContext): { version: number; fields: string[]; context: { run_id?: string } } {
  return { version: derivationVersion(spec), fields: [...spec.fields], context: spec.contextFields.includes("run_id") ? { run_id: ctx.runId } : {} };
}

/** The derivation and context a `derivation` claim states, ready for {@link deriveKey}. */
export function derivationOfClaim(claim: { version: number; fields: readonly string[]; context: { run_id?: string } }): {
  spec: KeyDerivationSpec;
  ctx: CallContext;
} {
  const runId = claim.context.run_id;
  return { spec: { fields: claim.fields, version: claim.version, contextFields: runId !== undefined ? ["run_id"] : [] }, ctx: { runId: runId ?? "" } };
}

/**
 * The RFC 8785 canonical JSON document that {@link deriveKey} hashes, with the
 * same checks and refusals. Exposed for debugging and for the published test
 * vectors, so that another implementation can compare bytes, not just digests.
 */
export function canonicalKeyDocument(toolId: string, spec: KeyDerivationSpec, args: ParsedArguments, ctx: CallContext): string {
  const parsed = parseSpec(spec);
  if (typeof toolId !== "string" || toolId === "") {
    throw refuse(Reasons.TOOL_ID_REQUIRED, "tool_id must be a non-empty string to derive a key", { field: "tool_id" });
  }
  const fields: JsonObject = {};
  for (const { pointer, tokens } of parsed) {
    const value = resolveJsonPointer(args.value, tokens);
    if (value === undefined) {
      throw refuse(Reasons.KEY_FIELD_MISSING, `arguments: key field ${pointer} is missing; every key field must be present`, {
        field: pointer,
      });
    }
    if (value === null) {
      throw refuse(Reasons.KEY_FIELD_NULL, `arguments: key field ${pointer} is null; a null identifies nothing, so every such call would share one key`, {
        field: pointer,
      });
    }
    const unsafe = unsafeIntegerAt(args.unsafeIntegerPaths, pointer);
    if (unsafe !== undefined) {
      throw refuse(
        Reasons.KEY_FIELD_UNSAFE_INTEGER,
        `arguments: key field ${pointer} holds an integer beyond ±(2^53-1) at ${unsafe}, which JSON numbers cannot carry exactly; ` + "send it as a string",
        { field: unsafe },
      );
    }
    fields[pointer] = value;
  }
  const context: JsonObject = {};
  if (spec.contextFields.includes("run_id")) {
    if (typeof ctx.runId !== "string" || ctx.runId === "") {
      throw refuse(
        Reasons.RUN_ID_REQUIRED,
        "run_id is required: this tool's key derivation names the run id (key.context_fields), so a call without one has no key",
        { field: "run_id" },
      );
    }
    context["run_id"] = ctx.runId;
  }
  const doc: JsonObject = { tool_id: toolId, derivation_version: derivationVersion(spec), fields, context };
  // canonicalize() returns undefined only for undefined input, which `doc` never is.
  return canonicalize(doc) as string;
}

/**
 * Reads a Queryable tool's request id from its arguments: a non-empty string of
 * at most 256 code points, or a safe integer (returned in decimal).
 *
 * @throws KeycapError reason `INVALID_JSON_POINTER`, `REQUEST_ID_FIELD_MISSING`
 *   (absent or null) or `REQUEST_ID_INVALID` (any other value).
 */
export function readRequestId(args: ParsedArguments, pointer: string): string {
  const value = resolveJsonPointer(args.value, parseJsonPointer(pointer));
  if (value === undefined || value === null) {
    throw refuse(Reasons.REQUEST_ID_FIELD_MISSING, `arguments: request id field ${pointer} is ${value === null ? "null" : "missing"}`, {
      field: pointer,
    });
  }
  if (typeof value === "string") {
    const length = countCodePoints(value);
    if (length > 0 && length <= MAX_REQUEST_ID_LENGTH) return value;
    throw refuse(
      Reasons.REQUEST_ID_INVALID,
      `arguments: request id field ${pointer} must be a non-empty string of at most ${MAX_REQUEST_ID_LENGTH} characters, got ${length}`,
      { field: pointer },
    );
  }
  if (typeof value === "number" && Number.isSafeInteger(value) && unsafeIntegerAt(args.unsafeIntegerPaths, pointer) === undefined) {
    // String(-0) is "0": the same id as 0, just as in keys.
    return String(value);
  }
  throw refuse(Reasons.REQUEST_ID_INVALID, `arguments: request id field ${pointer} must be a non-empty string or a safe integer, got ${describe(value)}`, {
    field: pointer,
  });
}

interface ParsedField {
  pointer: string;
  tokens: readonly string[];
}

/**
 * Parsed key-field pointers, by pointer text. Parsing is a pure function of the
 * text, so memoising it cannot change a key; it removes about a third of the
 * cost of a derivation (measured: 10 fields, ~3 µs of ~10 µs). Bounded: a
 * registry holds few distinct pointers, and the cache starts over if not.
 */
const pointerCache = new Map<string, readonly string[]>();
const POINTER_CACHE_LIMIT = 4096;

function parsePointerCached(pointer: string): readonly string[] {
  let tokens = pointerCache.get(pointer);
  if (tokens === undefined) {
    tokens = Object.freeze(parseJsonPointer(pointer));
    if (pointerCache.size >= POINTER_CACHE_LIMIT) pointerCache.clear();
    pointerCache.set(pointer, tokens);
  }
  return tokens;
}

function parseSpec(spec: KeyDerivationSpec, schema?: ArgumentSchema): ParsedField[] {
  if (spec.fields.length === 0) {
    throw refuse(Reasons.KEY_DERIVATION_NO_FIELDS, "key.fields is empty: an Idempotent tool must name at least one argument field that identifies the effect", {
      field: "key.fields",
    });
  }
  if (!Number.isSafeInteger(spec.version) || spec.version < 0) {
    throw refuse(Reasons.KEY_DERIVATION_BAD_VERSION, `key.version must be an integer ≥ 1 (0, not set, is 1), got ${spec.version}`, {
      field: "key.version",
    });
  }
  spec.contextFields.forEach((name, i) => {
    if (!CONTEXT_FIELDS.includes(name) || spec.contextFields.indexOf(name) !== i) {
      throw refuse(
        Reasons.KEY_DERIVATION_BAD_CONTEXT_FIELD,
        `key.context_fields[${i}] ${JSON.stringify(name)} must be one of ${CONTEXT_FIELDS.join(", ")} and appear once`,
        { field: `key.context_fields[${i}]` },
      );
    }
  });
  const seen = new Set<string>();
  return spec.fields.map((pointer, i) => {
    const field = `key.fields[${i}]`;
    let tokens: readonly string[];
    try {
      tokens = parsePointerCached(pointer);
    } catch (err) {
      if (err instanceof KeycapError) {
        throw invalidArgument(err.reason, `${field}: ${err.message}`, { ...err.metadata, field });
      }
      throw err;
    }
    // RFC 6901 escaping is a bijection, so equal strings are exactly equal pointers.
    if (seen.has(pointer)) {
      throw refuse(Reasons.KEY_DERIVATION_DUPLICATE_FIELD, `${field}: ${pointer} is named more than once in key.fields`, {
        field,
        pointer,
      });
    }
    seen.add(pointer);
    if (schema) {
      const description = schema.describeField(tokens);
      if (!description.defined) {
        throw refuse(
          Reasons.KEY_FIELD_NOT_IN_SCHEMA,
          `${field}: ${pointer} is not defined by the tool's argument schema (through properties, prefixItems/items, $ref or allOf)`,
          { field, pointer },
        );
      }
      if (description.volatile) {
        throw refuse(
          Reasons.KEY_FIELD_VOLATILE,
          `${field}: ${pointer} is volatile (${description.volatileReason ?? "per the argument schema"}); ` +
            "a field that changes between retries cannot identify an effect",
          { field, pointer },
        );
      }
    }
    return { pointer, tokens };
  });
}

/** The first recorded unsafe integer at or under `pointer`, if any. */
function unsafeIntegerAt(paths: ReadonlySet<string>, pointer: string): string | undefined {
  if (paths.size === 0) return undefined;
  if (paths.has(pointer)) return pointer;
  const prefix = pointer + "/";
  for (const p of paths) if (p.startsWith(prefix)) return p;
  return undefined;
}

function countCodePoints(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    // A high surrogate followed by a low one is one code point.
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    }
    n++;
  }
  return n;
}

function describe(value: JsonValue): string {
  if (Array.isArray(value)) return "an array";
  if (typeof value === "number") return `the number ${value}`;
  return `a ${typeof value}`;
}
