/**
 * A tool's argument schema (JSON Schema 2020-12), compiled once at registration.
 *
 * It serves two purposes: validating a call's arguments, and telling key
 * derivation whether a field it names is defined by the schema and whether it
 * is volatile (a clock reading or anything the schema flags as changing between
 * retries), which must never enter an idempotency key.
 */
import Ajv2020, { type ErrorObject, type ValidateFunction } from "ajv/dist/2020";
import addFormats from "ajv-formats";
import { KeycapError } from "../errors";
import { formatJsonPointer, parseJsonPointer, resolveJsonPointer } from "./json-pointer";
import { parseStrictJson, type JsonObject, type JsonValue } from "./strict-json";
import { Reasons, refuse } from "../refuse";

/** The annotation keyword with which a schema marks a field volatile. */
export const VOLATILE_KEYWORD = "x-keycap-volatile";

/** `format` values that denote a clock reading, and so a volatile field. */
export const VOLATILE_FORMATS: ReadonlySet<string> = new Set(["date-time", "date", "time"]);

/** Limits on the schema document itself (schemas are registered by operators, so larger than arguments). */
const SCHEMA_JSON_LIMITS = { maxBytes: 1024 * 1024, maxDepth: 128 };

/** How many Ajv errors a `ARGUMENTS_SCHEMA_VIOLATION` message lists. */
const ERRORS_SHOWN = 5;

/** What a schema says about one argument field. */
export interface FieldDescription {
  /** The schema names the field through `properties` / `prefixItems` / `items`. */
  defined: boolean;
  /** The field, an ancestor flagged `x-keycap-volatile`, or any schema below it is volatile. */
  volatile: boolean;
  /** Why it is volatile, as a location in the schema ("#/properties/at has format: date-time"). */
  volatileReason?: string;
}

/** A compiled argument schema. */
export interface ArgumentSchema {
  /** The schema document as registered. */
  readonly document: JsonObject;
  /**
   * Validates call arguments.
   * @throws KeycapError reason `ARGUMENTS_SCHEMA_VIOLATION`, naming the first few violations by instance path.
   */
  validate(value: JsonValue): void;
  /**
   * Describes the field that reference tokens (a parsed JSON Pointer) name.
   *
   * Walks `properties`, `prefixItems` / `items` (for numeric tokens), local
   * `$ref`s ("#", "#/$defs/...", "#/definitions/...", any "#/<pointer>") and `allOf`. Branches that may or may not apply (`anyOf`,
   * `oneOf`, `if`/`then`/`else`, `patternProperties`, `additionalProperties`)
   * do not define a field. When looking for volatility, every subschema below
   * the field counts, including those branches: a key field must be provably
   * stable. A `$ref` that cannot be followed (a remote or `$id`-relative URI,
   * `$dynamicRef`) counts as volatile for the same reason.
   */
  describeField(tokens: readonly string[]): FieldDescription;
}

/**
 * Parses and compiles a tool's argument schema (JSON Schema 2020-12).
 *
 * Ajv runs in strict mode for the schema itself: unknown keywords are refused
 * (a typo such as "fromat": "date-time" would otherwise hide a volatile field),
 * as are `required` names not in `properties` and non-finite numbers. Ajv's
 * stricter type and tuple checks are off: they refuse sound schemas (a
 * `format` without `type: string`) and add nothing to key safety.
 * `x-keycap-volatile` is the one extra keyword, and it must be a boolean.
 * All ajv-formats formats are known.
 *
 * @throws KeycapError reason `INVALID_ARGUMENT_SCHEMA` when the text is not
 *   strict JSON, is not an object, or Ajv refuses it (its message is included).
 */
export function compileArgumentSchema(schemaJson: string): ArgumentSchema {
  let document: JsonValue;
  try {
    document = parseStrictJson(schemaJson, SCHEMA_JSON_LIMITS, "argument schema contents").value;
  } catch (err) {
    if (err instanceof KeycapError) {
      throw refuse(Reasons.INVALID_ARGUMENT_SCHEMA, err.message, {
        field: "argument_schema",
        cause: err.reason,
      });
    }
    throw err;
  }
  if (document === null || typeof document !== "object" || Array.isArray(document)) {
    throw refuse(Reasons.INVALID_ARGUMENT_SCHEMA, "argument schema must be a JSON object (a JSON Schema 2020-12 document)", { field: "argument_schema" });
  }
  // One Ajv instance per schema: instances cache schemas by $id, and two tools
  // may well register schemas with the same $id.
  const ajv = new Ajv2020({
    strict: true,
    strictTypes: false,
    strictTuples: false,
    allErrors: true,
    logger: false,
  });
  addFormats(ajv);
  ajv.addKeyword({ keyword: VOLATILE_KEYWORD, schemaType: "boolean" });
  let validateFn: ValidateFunction;
  try {
    validateFn = ajv.compile(document);
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    throw refuse(Reasons.INVALID_ARGUMENT_SCHEMA, `argument schema is not a valid JSON Schema 2020-12 document: ${message}`, {
      field: "argument_schema",
    });
  }
  const root = document;
  return {
    document: root,
    validate(value: JsonValue): void {
      if (validateFn(value)) return;
      const errors = validateFn.errors ?? [];
      const first = errors[0];
      const listed = errors.slice(0, ERRORS_SHOWN).map(describeAjvError).join("; ");
      const more = errors.length > ERRORS_SHOWN ? ` (and ${errors.length - ERRORS_SHOWN} more)` : "";
      throw refuse(Reasons.ARGUMENTS_SCHEMA_VIOLATION, `arguments do not match the tool's schema: ${listed}${more}`, {
        field: first ? errorField(first) : "",
      });
    },
    describeField(tokens: readonly string[]): FieldDescription {
      return new SchemaWalker(root).describe(tokens);
    },
  };
}

function errorField(error: ErrorObject): string {
  const params = error.params as Record<string, unknown>;
  if (error.keyword === "required" && typeof params["missingProperty"] === "string") {
    return `${error.instancePath}/${formatJsonPointer([params["missingProperty"]]).slice(1)}`;
  }
  if (error.keyword === "additionalProperties" && typeof params["additionalProperty"] === "string") {
    return `${error.instancePath}/${formatJsonPointer([params["additionalProperty"]]).slice(1)}`;
  }
  return error.instancePath;
}

function describeAjvError(error: ErrorObject): string {
  const at = error.instancePath === "" ? "(top level)" : error.instancePath;
  const params = error.params as Record<string, unknown>;
  const extra =
    error.keyword === "additionalProperties" && typeof params["additionalProperty"] === "string" ? ` (${JSON.stringify(params["additionalProperty"])})` : "";
  return `${at} ${error.message ?? error.keyword}${extra}`;
}

/** A subschema with where it sits, and the schema resource its local refs resolve against. */
interface Located {
  schema: JsonValue;
  /** Location in the schema document, as a URI fragment ("#/properties/a"). */
  at: string;
  /** The innermost enclosing schema resource (the root, or a subschema with its own `$id`). */
  base: Located;
}

/** Keywords whose value is one subschema that applies at (or below) the instance location. */
const SINGLE_SUBSCHEMA = [
  "additionalProperties",
  "items",
  "contains",
  "not",
  "if",
  "then",
  "else",
  "propertyNames",
  "unevaluatedItems",
  "unevaluatedProperties",
  "contentSchema",
] as const;
/** Keywords whose value is a map of name → subschema. */
const SUBSCHEMA_MAP = ["properties", "patternProperties", "dependentSchemas"] as const;
/** Keywords whose value is an array of subschemas. */
const SUBSCHEMA_ARRAY = ["allOf", "anyOf", "oneOf", "prefixItems"] as const;

const ARRAY_INDEX = /^(?:0|[1-9][0-9]*)$/;

function isObject(v: JsonValue | undefined): v is JsonObject {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

function own(o: JsonObject, key: string): JsonValue | undefined {
  return Object.hasOwn(o, key) ? o[key] : undefined;
}

class SchemaWalker {
  private readonly root: Located;

  constructor(document: JsonObject) {
    const root = { schema: document, at: "#" } as Located;
    root.base = root;
    this.root = root;
  }

  describe(tokens: readonly string[]): FieldDescription {
    let current = this.expand([this.root]);
    let inheritedReason: string | undefined = current.opaque;
    for (const token of tokens) {
      inheritedReason ??= flaggedVolatile(current.nodes);
      const next: Located[] = [];
      for (const node of current.nodes) {
        const s = node.schema;
        if (!isObject(s)) continue;
        const props = own(s, "properties");
        if (isObject(props) && Object.hasOwn(props, token)) {
          next.push(this.child(node, props[token] as JsonValue, `/properties/${escapeFragment(token)}`));
        }
        if (ARRAY_INDEX.test(token)) {
          const index = Number(token);
          const prefix = own(s, "prefixItems");
          if (Array.isArray(prefix) && index < prefix.length) {
            next.push(this.child(node, prefix[index] as JsonValue, `/prefixItems/${index}`));
          } else {
            const items = own(s, "items");
            if (items !== undefined) next.push(this.child(node, items, "/items"));
          }
        }
      }
      current = this.expand(next);
      inheritedReason ??= current.opaque;
      // A `false` schema forbids the field outright, so it cannot identify a call.
      if (current.nodes.length === 0 || current.nodes.some((n) => n.schema === false)) {
        return { defined: false, volatile: false };
      }
    }
    const reason = inheritedReason ?? this.volatileBelow(current.nodes);
    return reason === undefined ? { defined: true, volatile: false } : { defined: true, volatile: true, volatileReason: reason };
  }

  /**
   * The schemas that apply at the same instance location as `nodes`: each node,
   * what its local `$ref` names, and its `allOf` members, transitively.
   * `opaque` explains the first `$ref` that could not be followed.
   */
  private expand(nodes: Located[]): { nodes: Located[]; opaque?: string } {
    const out: Located[] = [];
    const seen = new Set<JsonValue>();
    let opaque: string | undefined;
    const visit = (node: Located): void => {
      if (seen.has(node.schema)) return;
      seen.add(node.schema);
      out.push(node);
      const s = node.schema;
      if (!isObject(s)) return;
      const ref = own(s, "$ref");
      if (typeof ref === "string") {
        const target = this.resolveRef(node, ref);
        if (target) visit(target);
        else opaque ??= `${node.at} has a $ref keycap cannot follow (${JSON.stringify(ref)})`;
      }
      if (own(s, "$dynamicRef") !== undefined) opaque ??= `${node.at} has a $dynamicRef, which keycap cannot follow`;
      const allOf = own(s, "allOf");
      if (Array.isArray(allOf)) allOf.forEach((sub, i) => visit(this.child(node, sub, `/allOf/${i}`)));
    };
    nodes.forEach(visit);
    return opaque === undefined ? { nodes: out } : { nodes: out, opaque };
  }

  /** The first reason found why any schema at or below `nodes` is volatile, else undefined. */
  private volatileBelow(nodes: Located[]): string | undefined {
    const seen = new Set<JsonValue>();
    const stack = [...nodes];
    for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
      const s = node.schema;
      if (!isObject(s) || seen.has(s)) continue;
      seen.add(s);
      const format = own(s, "format");
      if (typeof format === "string" && VOLATILE_FORMATS.has(format)) return `${node.at} has format: ${format}`;
      if (own(s, VOLATILE_KEYWORD) === true) return `${node.at} has ${VOLATILE_KEYWORD}: true`;
      const ref = own(s, "$ref");
      if (typeof ref === "string") {
        const target = this.resolveRef(node, ref);
        if (!target) return `${node.at} has a $ref keycap cannot follow (${JSON.stringify(ref)})`;
        stack.push(target);
      }
      if (own(s, "$dynamicRef") !== undefined) return `${node.at} has a $dynamicRef, which keycap cannot follow`;
      for (const k of SINGLE_SUBSCHEMA) {
        const sub = own(s, k);
        if (sub !== undefined) stack.push(this.child(node, sub, `/${k}`));
      }
      for (const k of SUBSCHEMA_MAP) {
        const map = own(s, k);
        if (isObject(map)) for (const name of Object.keys(map)) stack.push(this.child(node, map[name] as JsonValue, `/${k}/${escapeFragment(name)}`));
      }
      for (const k of SUBSCHEMA_ARRAY) {
        const list = own(s, k);
        if (Array.isArray(list)) list.forEach((sub, i) => stack.push(this.child(node, sub, `/${k}/${i}`)));
      }
    }
    return undefined;
  }

  private child(parent: Located, schema: JsonValue, suffix: string): Located {
    const node = { schema, at: parent.at + suffix, base: parent.base } as Located;
    // A subschema with its own $id starts a new resource: "#..." refs inside it resolve against it.
    if (isObject(schema) && typeof own(schema, "$id") === "string") node.base = node;
    return node;
  }

  /** Resolves a local `$ref` ("#" or "#/<pointer>") against the node's resource; undefined if it cannot. */
  private resolveRef(node: Located, ref: string): Located | undefined {
    if (!ref.startsWith("#")) return undefined;
    let fragment: string;
    try {
      fragment = decodeURIComponent(ref.slice(1));
    } catch {
      return undefined;
    }
    const base = node.base;
    if (fragment === "") return base;
    if (fragment.startsWith("/")) {
      let tokens: string[];
      try {
        tokens = parseJsonPointer(fragment);
      } catch {
        return undefined;
      }
      const target = resolveJsonPointer(base.schema, tokens);
      if (target === undefined) return undefined;
      // Resolve the target's own resource the long way round: walk from the base.
      let located: Located = base;
      for (const token of tokens) {
        const next = resolveJsonPointer(located.schema, [token]) as JsonValue;
        located = this.child(located, next, `/${escapeFragment(token)}`);
      }
      return located;
    }
    // "#name" would be an $anchor, which Ajv's strict mode refuses to define.
    return undefined;
  }
}

/** The first schema among `nodes` that flags itself (and so everything below it) volatile. */
function flaggedVolatile(nodes: Located[]): string | undefined {
  for (const n of nodes) {
    if (isObject(n.schema) && own(n.schema, VOLATILE_KEYWORD) === true) return `${n.at} has ${VOLATILE_KEYWORD}: true`;
  }
  return undefined;
}

/** A reference token as it appears in a URI-fragment JSON Pointer. */
function escapeFragment(token: string): string {
  return formatJsonPointer([token]).slice(1);
}
