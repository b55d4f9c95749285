import { ContextField, type KeyDerivation } from "../gen/keycap/effect/v1/effect";
import type { EffectClassValid } from "../gen/keycap/effect/v1/effect.valid";
import type { ToolValid } from "../gen/keycap/kernel/v1/kernel.valid";
import { status } from "@grpc/grpc-js";
import { KeycapClientError } from "./errors";
import { Reasons } from "../gen/keycap/rules/v1/reasons.catalog";

/**
 * How an Idempotent tool's key is derived: built on the generated
 * `KeyDerivation`, with `fields` required and non-empty.
 */
export interface KeyDerivationSpec extends Omit<Partial<KeyDerivation>, "fields" | "contextFields"> {
  /** RFC 6901 JSON Pointers into the arguments, e.g. ["/order_id"]. At least one. */
  fields: readonly [string, ...string[]];
  /** "run_id": two identical calls in two runs are two effects. */
  contextFields?: readonly "run_id"[];
}

/** The Idempotent variant: `key` is required, never `undefined`. */
export interface IdempotentEffect {
  kind: "idempotent";
  /** How the key is derived. Required: without it the tool cannot be retried safely. */
  key: KeyDerivationSpec;
}

/**
 * A tool's effect class. In the generated types `Idempotent.key` is
 * `KeyDerivation | undefined`; here it is required, so an Idempotent tool
 * without a key derivation does not compile.
 */
export type EffectSpec = IdempotentEffect | { kind: "queryable"; requestIdField: string } | { kind: "unsafe" };

/**
 * Where an Idempotent tool's writes go through keycap's HTTP effect gateway
 * (`GatewayService.Forward`): a third-party API that honours an idempotency-key header.
 */
export interface HttpDestinationSpec {
  /** Every forward stays under this URL, e.g. "https://api.stripe.com/v1/". */
  baseUrl: string;
  /** Methods a forward may use. */
  methods: readonly [HttpWriteMethod, ...HttpWriteMethod[]];
  /** Response headers stored and replayed besides content-type. */
  responseHeaders?: readonly string[];
  /** The key's header; default "Idempotency-Key". */
  idempotencyHeader?: string;
  /** Allow private, loopback and link-local targets (an API inside your network). Default false. */
  allowPrivateNetwork?: boolean;
}

/** The write methods a destination may allow. */
export type HttpWriteMethod = "POST" | "PUT" | "PATCH" | "DELETE";

interface ToolDefinitionBase {
  /** Stable id, 1-128 of [A-Za-z0-9._:/-]. */
  id: string;
  /** Optional JSON Schema (2020-12) of the arguments; key fields must be defined and not volatile. */
  argumentsSchema?: Record<string, unknown>;
}

/**
 * A tool as the runtime declares it. Only an Idempotent tool may name an HTTP destination:
 * the gateway deduplicates by the kernel-derived key, so anything else does not compile.
 */
export type ToolDefinition =
  | (ToolDefinitionBase & { effect: IdempotentEffect; httpDestination?: HttpDestinationSpec })
  | (ToolDefinitionBase & { effect: Exclude<EffectSpec, IdempotentEffect>; httpDestination?: never });

/**
 * Declares a tool; the identity function, there for the type check.
 *
 * @example
 * const charge = defineTool({
 *   id: "payments.charge",
 *   effect: { kind: "idempotent", key: { fields: ["/order_id"], contextFields: ["run_id"] } },
 * });
 */
export function defineTool<const T extends ToolDefinition>(definition: T): T {
  return definition;
}

/**
 * The wire form of a definition, in the generated shape the proto's rules require.
 * @throws KeycapClientError INVALID_ARGUMENT (nothing sent) for what the types forbid but plain
 *   JavaScript can still pass: an Idempotent tool without `key.fields`, an unknown kind.
 */
export function toolToProto(def: ToolDefinition): ToolValid {
  let effectClass: EffectClassValid;
  const kind = (def.effect as { kind?: unknown } | undefined)?.kind;
  switch (def.effect?.kind) {
    case "idempotent":
      if (!Array.isArray((def.effect.key as { fields?: unknown } | undefined)?.fields)) {
        throw new KeycapClientError(
          status.INVALID_ARGUMENT,
          Reasons.KEY_DERIVATION_REQUIRED,
          `tool ${def.id}: an idempotent tool needs effect.key with the argument fields that identify its effect, e.g. effect: { kind: "idempotent", key: { fields: ["/order_id"] } } (not sent)`,
          { field: "tool.effect_class.idempotent.key" },
        );
      }
      effectClass = {
        kind: {
          $case: "idempotent",
          value: {
            key: {
              fields: [...def.effect.key.fields],
              version: def.effect.key.version ?? 1,
              contextFields: (def.effect.key.contextFields ?? []).map(() => ContextField.CONTEXT_FIELD_RUN_ID),
            },
          },
        },
      };
      break;
    case "queryable":
      effectClass = { kind: { $case: "queryable", value: { lookup: { requestIdField: def.effect.requestIdField } } } };
      break;
    case "unsafe":
      effectClass = { kind: { $case: "unsafe", value: {} } };
      break;
    default:
      throw new KeycapClientError(
        status.INVALID_ARGUMENT,
        Reasons.EFFECT_CLASS_REQUIRED,
        `tool ${String(def.id)}: effect.kind must be "idempotent", "queryable" or "unsafe", got ${JSON.stringify(kind)} (not sent)`,
        { field: "tool.effect_class" },
      );
  }
  return {
    toolId: def.id,
    effectClass,
    argumentsSchemaJson: def.argumentsSchema ? JSON.stringify(def.argumentsSchema) : "",
    registeredAt: undefined,
    owner: "",
    httpDestination: def.httpDestination
      ? {
          baseUrl: def.httpDestination.baseUrl,
          methods: [...def.httpDestination.methods],
          responseHeaders: [...(def.httpDestination.responseHeaders ?? [])],
          idempotencyHeader: def.httpDestination.idempotencyHeader ?? "",
          allowPrivateNetwork: def.httpDestination.allowPrivateNetwork ?? false,
        }
      : undefined,
  };
}
