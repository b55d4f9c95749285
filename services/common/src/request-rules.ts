/**
 * The request rules written in proto/ (protovalidate `buf.validate` annotations),
 * enforced on every request whose message has any, before a handler sees it.
 * Each failing rule is refused with the reason the proto names beside it
 * (`keycap.rules.v1.field` / `.oneof`, ADR 0010), a google.rpc.BadRequest field
 * violation per failing rule, and the proto field path.
 *
 * ts-proto stays the stub generator; the rules are evaluated on a protobuf-es
 * decoding of the same bytes (protovalidate-es works on protobuf-es messages),
 * with descriptors from the descriptor set `make generate` builds.
 */
import * as fs from "node:fs";
import {
  createFileRegistry,
  fromBinary,
  getOption,
  hasOption,
  type DescExtension,
  type DescField,
  type DescMessage,
  type DescOneof,
  type FileRegistry,
} from "@bufbuild/protobuf";
import { isReflectList, isReflectMessage, pathToString, reflect, type Path } from "@bufbuild/protobuf/reflect";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { createValidator, type Validator } from "@bufbuild/protovalidate";
import type { ServiceDefinition } from "@grpc/grpc-js";
import { Code, KeycapError, type FieldViolation } from "./errors";
import { descriptorSetPath } from "./repo-paths";
import { refuseRequest, requestRefusal } from "./request-refusal";

/** Reason of a failing rule that the proto does not name one for. */
export const UNNAMED_RULE_REASON = "REQUEST_INVALID";

/** One RequestRules per descriptor set: every listener of a process shares it. */
const loaded = new Map<string, RequestRules>();

/** The rules of keycap's protos: a validator and the reasons the protos name. */
export class RequestRules {
  private readonly validator: Validator;
  private readonly fieldExt: DescExtension;
  private readonly oneofExt: DescExtension;
  private readonly validateFieldExt: DescExtension;
  private readonly validateOneofExt: DescExtension;
  private readonly hasRules = new Map<DescMessage, boolean>();

  constructor(readonly registry: FileRegistry) {
    this.validator = createValidator({ registry });
    this.fieldExt = need(registry.getExtension("keycap.rules.v1.field"), "keycap.rules.v1.field");
    this.oneofExt = need(registry.getExtension("keycap.rules.v1.oneof"), "keycap.rules.v1.oneof");
    this.validateFieldExt = need(registry.getExtension("buf.validate.field"), "buf.validate.field");
    this.validateOneofExt = need(registry.getExtension("buf.validate.oneof"), "buf.validate.oneof");
  }

  /** The rules of the descriptor set `make generate` builds (gen/keycap.binpb), read once per process. */
  static load(file = descriptorSetPath()): RequestRules {
    let rules = loaded.get(file);
    if (!rules) {
      rules = new RequestRules(createFileRegistry(fromBinary(FileDescriptorSetSchema, fs.readFileSync(file))));
      loaded.set(file, rules);
    }
    return rules;
  }

  /** The refusal for these request bytes, or undefined when every rule holds. */
  check(desc: DescMessage, bytes: Uint8Array): KeycapError | undefined {
    const message = fromBinary(desc, bytes);
    const result = this.validator.validate(desc, message);
    if (result.kind === "valid") return undefined;
    if (result.kind === "error") throw result.error; // a rule that cannot be compiled: a defect in proto/
    const violations: FieldViolation[] = result.violations.map((v) => {
      const field = pathToString(v.field);
      const last = v.field[v.field.length - 1];
      // A rule on a list's items reports the item's path; its reason sits on the list field.
      const owner = last?.kind === "list_sub" ? v.field[v.field.length - 2] : last;
      const reason = owner ? this.reasonFor(owner, v.ruleId) : undefined;
      const got = scalarAt(desc, message, v.field);
      const description = got === undefined ? v.message : `${v.message} (got ${JSON.stringify(got)})`;
      return { field, description, reason: reason ?? UNNAMED_RULE_REASON };
    });
    const first = violations[0]!;
    return new KeycapError(Code.INVALID_ARGUMENT, first.reason, `${first.field}: ${first.description}`, { field: first.field }, violations);
  }

  /**
   * The check of one message type's rules, for requests that arrive inside another: the
   * items of a batch RPC, which the batch's own rules leave to the handler (`items.ignore`)
   * so that one broken item refuses that item, not the batch.
   */
  checkerOf(typeName: string): (bytes: Uint8Array) => KeycapError | undefined {
    const desc = need(this.registry.getMessage(typeName), typeName);
    return (bytes) => this.check(desc, bytes);
  }

  /** Whether the message, or any message it contains, has a rule (cached). */
  hasAnyRule(desc: DescMessage, seen = new Set<DescMessage>()): boolean {
    const known = this.hasRules.get(desc);
    if (known !== undefined) return known;
    if (seen.has(desc)) return false;
    seen.add(desc);
    const any =
      desc.fields.some(
        (f) => hasOption(f, this.validateFieldExt as Parameters<typeof hasOption>[1]) || (f.message !== undefined && this.hasAnyRule(f.message, seen)),
      ) || desc.oneofs.some((o) => hasOption(o, this.validateOneofExt as Parameters<typeof hasOption>[1]));
    this.hasRules.set(desc, any);
    return any;
  }

  private reasonFor(el: Path[number], ruleId: string): string | undefined {
    if (el.kind !== "field" && el.kind !== "oneof") return undefined;
    const refusals = [
      ...refusalsOf(el, el.kind === "field" ? this.fieldExt : this.oneofExt),
      // A oneof's "required" is reported on the oneof; protobuf-es may report the field.
      ...(el.kind === "field" && el.oneof ? refusalsOf(el.oneof, this.oneofExt) : []),
    ];
    return refusals.find((r) => r.rule === ruleId)?.reason;
  }
}

/**
 * The service definition with each request whose message has rules checked
 * against them at decoding; the shared unary handler answers the refusal.
 */
export function withRequestRules(definition: ServiceDefinition, rules: RequestRules): ServiceDefinition {
  const out: Record<string, ServiceDefinition[string]> = {};
  for (const [name, method] of Object.entries(definition)) {
    const desc = inputOf(rules.registry, method.path);
    if (!desc || !rules.hasAnyRule(desc)) {
      out[name] = method;
      continue;
    }
    const decode = method.requestDeserialize;
    out[name] = {
      ...method,
      requestDeserialize: (value: Buffer) => {
        const message = decode(value) as unknown;
        // Refused already (ill-formed UTF-8): that reason stands, no second decoding.
        if (requestRefusal(message) === undefined) {
          const refusal = rules.check(desc, value);
          if (refusal) refuseRequest(message, refusal);
        }
        return message;
      },
    };
  }
  return out as ServiceDefinition;
}

/** The request message of "/pkg.Service/Method". */
function inputOf(registry: FileRegistry, path: string): DescMessage | undefined {
  const [, service, method] = path.split("/");
  const desc = service ? registry.getService(service) : undefined;
  return desc?.methods.find((m) => m.name === method)?.input;
}

/** The string or number at `path` (so a refusal can show the value it refused), if that is what is there. */
function scalarAt(desc: DescMessage, message: Parameters<typeof reflect>[1], path: Path): string | number | undefined {
  let at: unknown = reflect(desc, message);
  for (const item of path) {
    if (item.kind === "field" && isReflectMessage(at)) at = at.isSet(item) ? at.get(item) : undefined;
    else if (item.kind === "list_sub" && isReflectList(at)) at = at.get(item.index);
    else return undefined;
  }
  if (typeof at === "string") return shown(at);
  return typeof at === "number" ? at : undefined;
}

/** Longest string a refusal repeats, in code points: a refused value can be large (a 4 KiB detail). */
const MAX_SHOWN_CHARS = 64;

/** The string as a refusal shows it: whole up to MAX_SHOWN_CHARS code points, else that many and "…" (the clients do the same). */
function shown(s: string): string {
  if (s.length <= MAX_SHOWN_CHARS) return s;
  const points = [...s];
  return points.length <= MAX_SHOWN_CHARS ? s : `${points.slice(0, MAX_SHOWN_CHARS).join("")}…`;
}

interface Refusal {
  rule: string;
  reason: string;
}

function refusalsOf(el: DescField | DescOneof, ext: DescExtension): Refusal[] {
  const value: unknown = getOption(el, ext as Parameters<typeof getOption>[1]);
  if (!Array.isArray(value)) return [];
  return value.flatMap((r: unknown) => {
    const o = r as { rule?: unknown; reason?: unknown };
    return typeof o.rule === "string" && typeof o.reason === "string" ? [{ rule: o.rule, reason: o.reason }] : [];
  });
}

function need<T>(v: T | undefined, name: string): T {
  if (v === undefined) throw new Error(`descriptor set has no ${name}; run make generate`);
  return v;
}
