import canonicalize from "canonicalize";
import { createHash } from "node:crypto";
import { ContextField, type EffectClass } from "../../../gen/ts/keycap/effect/v1/effect";
import type { Tool } from "../../../gen/ts/keycap/kernel/v1/kernel";
import { invalidArgument } from "../../common/src/errors";
import type { EffectName } from "../../capability/src";
import type { HttpDestination } from "../../../gen/ts/keycap/effect/v1/destination";
import { normalizeDestination, type HttpDestinationSpec } from "../../common/src/domain/http-destination";
import { compileArgumentSchema, type ArgumentSchema } from "../../common/src/domain/argument-schema";
import { parseJsonPointer } from "../../common/src/domain/json-pointer";
import { derivationVersion, validateDerivation, type ContextField as DomainContextField, type KeyDerivationSpec } from "../../common/src/domain/key-derivation";
import { Reasons, refuse } from "../../common/src/refuse";

/** A tool's effect class in domain terms (no protobuf types). */
export type ToolEffect = { kind: "idempotent"; key: KeyDerivationSpec } | { kind: "queryable"; requestIdField: string } | { kind: "unsafe" };

/** A validated tool definition, normalised so that equal definitions compare equal. */
export interface ToolDefinition {
  toolId: string;
  effect: ToolEffect;
  /** Canonical JSON (RFC 8785) of the argument schema, when one was registered. */
  argumentsSchemaJson?: string;
  /** Where the tool's writes go through the HTTP effect gateway (Idempotent tools only). */
  httpDestination?: HttpDestinationSpec;
}

/** A definition ready for calls: its schema compiled once. */
export interface CompiledTool {
  definition: ToolDefinition;
  schema?: ArgumentSchema;
  /** SHA-256 of the canonical definition: equal definitions, equal fingerprints. */
  fingerprint: string;
  registeredAt: Date;
  /** The principal that registered the tool; undefined for a tool registered before principals existed. */
  owner?: string;
}

const TOOL_ID = /^[A-Za-z0-9._:/-]{1,128}$/;

/** Checks a tool id's shape (also used by BeginCall and the CLI). */
export function checkToolId(toolId: string, field = "tool.toolId"): void {
  if (!TOOL_ID.test(toolId)) {
    throw refuse(Reasons.INVALID_TOOL_ID, `${field} must be 1-128 characters of [A-Za-z0-9._:/-], got ${JSON.stringify(toolId)}`, { field });
  }
}

/**
 * Reads a RegisterTool request into a definition, refusing what cannot be
 * enforced: an Idempotent tool without a key derivation, a derivation that
 * names no field, a bad pointer, a key field the schema does not define or
 * marks volatile, a Queryable tool without a request-id field.
 */
export function definitionFromProto(tool: Tool | undefined): CompiledTool {
  if (!tool) throw refuse(Reasons.TOOL_REQUIRED, "tool is required", { field: "tool" });
  checkToolId(tool.toolId);
  let schema: ArgumentSchema | undefined;
  let argumentsSchemaJson: string | undefined;
  if (tool.argumentsSchemaJson.trim() !== "") {
    schema = compileArgumentSchema(tool.argumentsSchemaJson);
    argumentsSchemaJson = canonicalize(schema.document) as string;
  }
  const effect = effectFromProto(tool.effectClass, schema);
  const httpDestination = destinationFromProto(tool.httpDestination, effect);
  const definition: ToolDefinition = {
    toolId: tool.toolId,
    effect,
    ...(argumentsSchemaJson ? { argumentsSchemaJson } : {}),
    ...(httpDestination ? { httpDestination } : {}),
  };
  return { definition, ...(schema ? { schema } : {}), fingerprint: fingerprintOf(definition), registeredAt: new Date() };
}

/** Rebuilds a compiled tool from its stored (already validated) definition. */
export function compileStored(definition: ToolDefinition, registeredAt: Date): CompiledTool {
  const schema = definition.argumentsSchemaJson ? compileArgumentSchema(definition.argumentsSchemaJson) : undefined;
  return { definition, ...(schema ? { schema } : {}), fingerprint: fingerprintOf(definition), registeredAt };
}

/**
 * The gateway sends a key's request once and replays its answer: that is retry safety by
 * key, which only an Idempotent tool has.
 */
function destinationFromProto(destination: HttpDestination | undefined, effect: ToolEffect): HttpDestinationSpec | undefined {
  if (!destination) return undefined;
  if (effect.kind !== "idempotent") {
    throw refuse(
      Reasons.HTTP_DESTINATION_NEEDS_IDEMPOTENT,
      `tool.http_destination: only an Idempotent tool can have an HTTP destination (this one is ${effect.kind}): the gateway deduplicates by the kernel-derived key`,
      { field: "tool.http_destination" },
    );
  }
  return normalizeDestination(destination);
}

function effectFromProto(effectClass: EffectClass | undefined, schema: ArgumentSchema | undefined): ToolEffect {
  const kind = effectClass?.kind;
  if (!kind) {
    throw refuse(Reasons.EFFECT_CLASS_REQUIRED, "tool.effect_class is required: set exactly one of idempotent, queryable or unsafe", {
      field: "tool.effect_class",
    });
  }
  switch (kind.$case) {
    case "idempotent": {
      const key = kind.value.key;
      if (!key) {
        throw refuse(
          Reasons.KEY_DERIVATION_REQUIRED,
          "tool.effect_class.idempotent.key is required: an Idempotent tool must name the argument fields its key is derived from",
          { field: "tool.effect_class.idempotent.key" },
        );
      }
      const contextFields: DomainContextField[] = [];
      for (const c of key.contextFields) {
        if (c !== ContextField.CONTEXT_FIELD_RUN_ID) {
          throw refuse(Reasons.KEY_DERIVATION_BAD_CONTEXT_FIELD, `tool.effect_class.idempotent.key.context_fields: unknown context field ${c}`, {
            field: "tool.effect_class.idempotent.key.context_fields",
          });
        }
        if (!contextFields.includes("run_id")) contextFields.push("run_id");
      }
      const spec: KeyDerivationSpec = { fields: [...key.fields], version: derivationVersion(key), contextFields };
      try {
        validateDerivation(spec, schema);
      } catch (err) {
        // The derivation names its fields from `key.` on (key.fields[0], key.version).
        throw prefixField(err, "tool.effect_class.idempotent", (inner) => (inner.startsWith("key") ? inner : "key"));
      }
      return { kind: "idempotent", key: spec };
    }
    case "queryable": {
      const field = kind.value.lookup?.requestIdField ?? "";
      if (field === "") {
        throw refuse(
          Reasons.REQUEST_ID_FIELD_REQUIRED,
          "tool.effect_class.queryable.lookup.request_id_field is required: a Queryable tool must say where its request id is",
          { field: "tool.effect_class.queryable.lookup.request_id_field" },
        );
      }
      try {
        const tokens = parseJsonPointer(field);
        if (schema) {
          const d = schema.describeField(tokens);
          if (!d.defined) {
            throw refuse(Reasons.REQUEST_ID_FIELD_NOT_IN_SCHEMA, `request id field ${field} is not defined by the argument schema`, { field });
          }
        }
      } catch (err) {
        throw prefixField(err, "tool.effect_class.queryable.lookup", () => "request_id_field");
      }
      return { kind: "queryable", requestIdField: field };
    }
    case "unsafe":
      return { kind: "unsafe" };
  }
}

/** A domain refusal re-addressed to the request's proto field path (dotted, snake_case). */
function prefixField(err: unknown, prefix: string, relative: (inner: string) => string): unknown {
  if (err instanceof Error && "reason" in err && "metadata" in err) {
    const e = err as Error & { reason: string; metadata: Record<string, string> };
    const field = `${prefix}.${relative(e.metadata["field"] ?? "")}`;
    return invalidArgument(e.reason, `${e.message} (${field})`, { ...e.metadata, field });
  }
  return err;
}

function fingerprintOf(definition: ToolDefinition): string {
  const doc = {
    tool_id: definition.toolId,
    effect: definition.effect,
    arguments_schema: definition.argumentsSchemaJson ?? null,
    // Only when present: tools registered before destinations existed keep their fingerprint.
    ...(definition.httpDestination ? { http_destination: definition.httpDestination } : {}),
  };
  return createHash("sha256")
    .update(canonicalize(doc) as string)
    .digest("hex");
}

/** The definition back as protobuf, for GetTool/ListTools. */
export function toolToProto(tool: CompiledTool): Tool {
  const e = tool.definition.effect;
  const effectClass: EffectClass =
    e.kind === "idempotent"
      ? {
          kind: {
            $case: "idempotent",
            value: {
              key: {
                fields: [...e.key.fields],
                version: e.key.version,
                contextFields: e.key.contextFields.map(() => ContextField.CONTEXT_FIELD_RUN_ID),
              },
            },
          },
        }
      : e.kind === "queryable"
        ? { kind: { $case: "queryable", value: { lookup: { requestIdField: e.requestIdField } } } }
        : { kind: { $case: "unsafe", value: {} } };
  return {
    toolId: tool.definition.toolId,
    effectClass,
    argumentsSchemaJson: tool.definition.argumentsSchemaJson ?? "",
    registeredAt: tool.registeredAt,
    owner: tool.owner ?? "",
    httpDestination: destinationToProto(tool.definition.httpDestination),
  };
}

function destinationToProto(d: HttpDestinationSpec | undefined): HttpDestination | undefined {
  if (!d) return undefined;
  return {
    baseUrl: d.baseUrl,
    methods: [...d.methods],
    responseHeaders: [...d.responseHeaders],
    idempotencyHeader: d.idempotencyHeader,
    allowPrivateNetwork: d.allowPrivateNetwork,
  };
}

export function effectNameOf(effect: ToolEffect): EffectName {
  return effect.kind;
}
