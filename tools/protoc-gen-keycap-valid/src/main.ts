/**
 * protoc-gen-keycap-valid: for every message whose protovalidate rules change
 * its shape, a `<Message>Valid` type over ts-proto's generated interface, in
 * `<file>.valid.ts` beside it. A `required` message field is no longer
 * `| undefined`, a list with `min_items >= 1` is a non-empty tuple, a required
 * oneof cannot be left unset, and a field of such a message takes its Valid
 * type. Functions that must only send a valid shape take the Valid types, so
 * the compiler refuses what the server would (ADR 0010).
 *
 * It reads the same annotations the servers and clients validate with; it
 * generates types only (no code), so ts-proto stays the stub generator.
 *
 * It also carries the reason catalogue (proto/keycap/rules/v1/reasons.proto) into
 * every client: `<file>.catalog.ts` beside the TypeScript stubs, and, with the option
 * `reasons=go` or `reasons=python`, only the catalogue as a Go package
 * (`reasons_gen.go`) or a Python module (`reasons.py`) for the clients in those
 * languages (clients/go/generate.sh, clients/python/generate.sh; ADR 0027).
 */
import { createRegistry, getOption, ScalarType, type DescEnum, type DescExtension, type DescField, type DescMessage, type DescOneof } from "@bufbuild/protobuf";
import { createEcmaScriptPlugin, getComments, runNodeJs, type Schema } from "@bufbuild/protoplugin";

interface Rules {
  required: boolean;
  minItems: number;
}

function rulesOf(el: DescField | DescOneof, ext: DescExtension | undefined): Rules {
  if (!ext) return { required: false, minItems: 0 };
  const v = getOption(el, ext as Parameters<typeof getOption>[1]) as unknown as {
    required?: boolean;
    type?: { case?: string; value?: { minItems?: bigint | number } };
  };
  const minItems = v.type?.case === "repeated" ? Number(v.type.value?.minItems ?? 0) : 0;
  return { required: v.required === true, minItems };
}

/** ts-proto's name of a message or enum: nested names joined with "_". */
function tsName(desc: DescMessage | DescEnum): string {
  return desc.typeName.slice(desc.file.proto.package.length + (desc.file.proto.package ? 1 : 0)).replace(/\./g, "_");
}

/** The module specifier of ts-proto's file for `desc`, relative to the file being generated. */
function relativeModule(from: string, to: string, suffix: string): string {
  const a = from.split("/").slice(0, -1);
  const b = to.split("/");
  let i = 0;
  while (i < a.length && i < b.length - 1 && a[i] === b[i]) i++;
  const up = a.length - i;
  return (up === 0 ? "./" : "../".repeat(up)) + b.slice(i).join("/") + suffix;
}

interface Options {
  /** Emit only the reason catalogue, in this language. */
  reasons?: "go" | "python";
}

function parseOptions(raw: { key: string; value: string }[]): Options {
  const options: Options = {};
  for (const { key, value } of raw) {
    if (key === "reasons" && (value === "go" || value === "python")) options.reasons = value;
    else throw new Error(`protoc-gen-keycap-valid: unknown option ${key}=${value}`);
  }
  return options;
}

function generate(schema: Schema<Options>): void {
  const registry = createRegistry(...schema.allFiles);
  const codeExt = registry.getExtension("keycap.rules.v1.code");
  const target = schema.options.reasons;
  if (target !== undefined) {
    const catalogues = schema.files.flatMap((f) => f.enums.filter((e) => e.name === "Reason"));
    if (catalogues.length !== 1 || !codeExt) throw new Error("protoc-gen-keycap-valid: reasons=" + target + " needs exactly reasons.proto");
    const entries = catalogueEntries(catalogues[0]!, codeExt);
    if (target === "go") generateGoCatalogue(schema, catalogues[0]!, entries);
    else generatePythonCatalogue(schema, catalogues[0]!, entries);
    return;
  }
  const fieldExt = registry.getExtension("buf.validate.field");
  const oneofExt = registry.getExtension("buf.validate.oneof");

  const memo = new Map<DescMessage, boolean>();
  const needsValid = (m: DescMessage, stack = new Set<DescMessage>()): boolean => {
    const known = memo.get(m);
    if (known !== undefined) return known;
    if (stack.has(m)) return false;
    stack.add(m);
    const result =
      m.oneofs.some((o) => rulesOf(o, oneofExt).required || o.fields.some((f) => f.message !== undefined && needsValid(f.message, stack))) ||
      m.fields.some((f) => {
        const r = rulesOf(f, fieldExt);
        if (f.fieldKind === "message") return r.required || needsValid(f.message, stack);
        if (f.fieldKind === "list") return r.minItems > 0 || (f.listKind === "message" && needsValid(f.message, stack));
        return false;
      });
    memo.set(m, result);
    return result;
  };

  for (const file of schema.files) {
    const catalogue = file.enums.find((e) => e.name === "Reason");
    if (catalogue && codeExt) generateCatalogue(schema, file.name, catalogue, codeExt);
    const messages = allMessages(file.messages).filter((m) => needsValid(m));
    if (messages.length === 0) continue;
    const out = schema.generateFile(`${file.name}.valid.ts`);
    out.print("// Generated by tools/protoc-gen-keycap-valid from ", file.proto.name, ". DO NOT EDIT.");
    out.print("// The shapes protovalidate's rules allow (ADR 0010).");
    out.print("/* eslint-disable */");
    const imports = new Map<string, Set<string>>();
    const use = (desc: DescMessage | DescEnum, valid: boolean): string => {
      const name = tsName(desc) + (valid ? "Valid" : "");
      if (desc.file === file && valid) return name;
      const mod = relativeModule(file.name, desc.file.name, valid ? ".valid" : "");
      (imports.get(mod) ?? imports.set(mod, new Set()).get(mod)!).add(name);
      return name;
    };
    const body: string[] = [];
    for (const m of messages) {
      const base = use(m, false);
      const overrides: string[] = [];
      const omitted: string[] = [];
      for (const o of m.oneofs) {
        const r = rulesOf(o, oneofExt);
        const changes = r.required || o.fields.some((f) => f.message !== undefined && needsValid(f.message));
        if (!changes) continue;
        const cases = o.fields.map((f) => `{ $case: "${f.localName}"; value: ${elementType(f, use, needsValid)} }`).join(" | ");
        omitted.push(o.localName);
        overrides.push(`  ${o.localName}${r.required ? "" : "?"}: ${cases}${r.required ? "" : " | undefined"};`);
      }
      for (const f of m.fields) {
        if (f.oneof) continue;
        const r = rulesOf(f, fieldExt);
        if (f.fieldKind === "message" && (r.required || needsValid(f.message))) {
          omitted.push(f.localName);
          overrides.push(`  ${f.localName}: ${elementType(f, use, needsValid)}${r.required ? "" : " | undefined"};`);
        } else if (f.fieldKind === "list" && (r.minItems > 0 || (f.listKind === "message" && needsValid(f.message)))) {
          const e = elementType(f, use, needsValid);
          omitted.push(f.localName);
          overrides.push(`  ${f.localName}: ${r.minItems > 0 ? `[${e}, ...${e}[]]` : `${e}[]`};`);
        }
      }
      body.push("");
      body.push(`/** {@link ${base}} as the rules of ${m.typeName} require it. */`);
      body.push(`export type ${tsName(m)}Valid = Omit<${base}, ${omitted.map((n) => JSON.stringify(n)).join(" | ")}> & {`);
      body.push(...overrides);
      body.push("};");
    }
    for (const [mod, names] of [...imports].sort(([a], [b]) => a.localeCompare(b))) {
      out.print(`import type { ${[...names].sort().join(", ")} } from "${mod}";`);
    }
    for (const line of body) out.print(line);
  }
}

/**
 * The reason catalogue (enum Reason with a `code` option per value) as constants:
 * reason string → gRPC status code, and the reason names themselves.
 */
function generateCatalogue(schema: Schema<Options>, fileName: string, e: DescEnum, codeExt: DescExtension): void {
  const out = schema.generateFile(`${fileName}.catalog.ts`);
  out.print("// Generated by tools/protoc-gen-keycap-valid from ", e.file.proto.name, ". DO NOT EDIT.");
  out.print("/* eslint-disable */");
  out.print("");
  out.print("/** Every refusal reason keycap answers with, and the gRPC status code it always comes with. */");
  out.print("export const REASON_CODES = {");
  for (const { name, code, doc } of catalogueEntries(e, codeExt)) {
    if (doc) out.print(`  /** ${doc.replace(/\*\//g, "*\\/")} */`);
    out.print(`  ${name}: ${code},`);
  }
  out.print("} as const;");
  out.print("");
  out.print("/** A refusal reason of the catalogue. */");
  out.print("export type Reason = keyof typeof REASON_CODES;");
  out.print("");
  out.print("/** The reasons by name, for code that branches on them (`err.reason === Reasons.KEY_FIELD_MISSING`). */");
  out.print("export const Reasons = Object.freeze(Object.fromEntries(Object.keys(REASON_CODES).map((r) => [r, r]))) as { readonly [R in Reason]: R };");
}

/** One reason of the catalogue: its name (without REASON_), its gRPC code (number and name), its comment. */
interface CatalogueEntry {
  name: string;
  code: number;
  /** The gRPC code's name, e.g. "INVALID_ARGUMENT" (the Code enum's value name without CODE_). */
  codeName: string;
  doc: string | undefined;
}

function catalogueEntries(e: DescEnum, codeExt: DescExtension): CatalogueEntry[] {
  const codeNames = new Map((codeExt.fieldKind === "enum" ? codeExt.enum.values : []).map((v) => [v.number, v.name.replace(/^CODE_/, "")]));
  return e.values
    .filter((v) => v.number !== 0)
    .map((v) => {
      const code = Number(getOption(v, codeExt as Parameters<typeof getOption>[1]));
      const codeName = codeNames.get(code);
      if (!Number.isInteger(code) || code <= 0 || codeName === undefined) throw new Error(`protoc-gen-keycap-valid: ${v.name} has no code`);
      return { name: v.name.replace(/^REASON_/, ""), code, codeName, doc: getComments(v).leading?.trim() };
    });
}

/** Go's name of a reason or code: KEY_MISMATCH → KeyMismatch, REQUEST_ID_MISMATCH → RequestIDMismatch. */
function goName(upperSnake: string): string {
  const initialisms = new Set(["ID", "JSON", "UTF8", "HTTP", "URL", "TLS", "RPC"]);
  return upperSnake
    .split("_")
    .map((w) => (initialisms.has(w) ? w : w.charAt(0) + w.slice(1).toLowerCase()))
    .join("");
}

/** Comment text as line comments at `indent` (none when empty). */
function lineComments(doc: string | undefined, indent: string, marker: string): string[] {
  return doc ? doc.split("\n").map((l) => `${indent}${marker}${l.trim() ? " " + l.trim() : ""}`) : [];
}

/** The catalogue as Go package `reasons` (reasons_gen.go): a constant a reason, and each reason's code. */
function generateGoCatalogue(schema: Schema<Options>, e: DescEnum, entries: CatalogueEntry[]): void {
  // Laid out for gofmt, which clients/go/generate.sh runs over it (the map's columns).
  const out = schema.generateFile("reasons_gen.go");
  out.print("// Code generated by tools/protoc-gen-keycap-valid from ", e.file.proto.name, ". DO NOT EDIT.");
  out.print("");
  out.print("// Package reasons is keycap's reason catalogue (proto/keycap/rules/v1/reasons.proto):");
  out.print("// every google.rpc.ErrorInfo reason keycap refuses with, as a constant for a switch on");
  out.print("// Error.Reason, and the gRPC status code each one always comes with.");
  out.print("package reasons");
  out.print("");
  out.print('import "google.golang.org/grpc/codes"');
  out.print("");
  out.print("// Every reason of the catalogue.");
  out.print("const (");
  entries.forEach((r, i) => {
    if (i > 0 && r.doc) out.print("");
    for (const l of lineComments(r.doc, "\t", "//")) out.print(l);
    out.print(`\t${goName(r.name)} = "${r.name}"`);
  });
  out.print(")");
  out.print("");
  out.print("var codeOf = map[string]codes.Code{");
  for (const r of entries) out.print(`\t${goName(r.name)}: codes.${goName(r.codeName)},`);
  out.print("}");
  out.print("");
  out.print("// Code is the gRPC status code reason always comes with; false for a reason not in the catalogue.");
  out.print("func Code(reason string) (codes.Code, bool) {");
  out.print("\tc, ok := codeOf[reason]");
  out.print("\treturn c, ok");
  out.print("}");
  out.print("");
  out.print("// All is every reason of the catalogue, in its order.");
  out.print("func All() []string {");
  out.print("\treturn []string{");
  for (const r of entries) out.print(`\t\t${goName(r.name)},`);
  out.print("\t}");
  out.print("}");
}

/** The catalogue as Python module keycap_client.reasons (reasons.py). */
function generatePythonCatalogue(schema: Schema<Options>, e: DescEnum, entries: CatalogueEntry[]): void {
  const out = schema.generateFile("reasons.py");
  out.print(`"""keycap's reason catalogue (proto/keycap/rules/v1/reasons.proto).`);
  out.print("");
  out.print("Generated by tools/protoc-gen-keycap-valid from ", e.file.proto.name, ". DO NOT EDIT.");
  out.print("");
  out.print("Every ``google.rpc.ErrorInfo`` reason keycap refuses with, as a constant to compare");
  out.print("``KeycapError.reason`` with (``err.reason == reasons.KEY_MISMATCH``), and :data:`CODES`,");
  out.print("the gRPC status code each one always comes with.");
  out.print(`"""`);
  out.print("");
  out.print("from __future__ import annotations");
  out.print("");
  out.print("from collections.abc import Mapping");
  out.print("from types import MappingProxyType");
  out.print("from typing import Final");
  out.print("");
  out.print("import grpc");
  out.print("");
  for (const r of entries) {
    for (const l of lineComments(r.doc, "", "#:")) out.print(l);
    out.print(`${r.name}: Final = "${r.name}"`);
  }
  out.print("");
  out.print("#: The gRPC status code of every reason of the catalogue, in its order.");
  out.print("CODES: Final[Mapping[str, grpc.StatusCode]] = MappingProxyType(");
  out.print("    {");
  for (const r of entries) out.print(`        ${r.name}: grpc.StatusCode.${r.codeName},`);
  out.print("    }");
  out.print(")");
  out.print("");
  out.print("__all__ = [");
  out.print(`    "CODES",`);
  for (const r of entries) out.print(`    "${r.name}",`);
  out.print("]");
}

function allMessages(ms: readonly DescMessage[]): DescMessage[] {
  return ms.flatMap((m) => [m, ...allMessages(m.nestedMessages)]);
}

function elementType(f: DescField, use: (d: DescMessage | DescEnum, valid: boolean) => string, needsValid: (m: DescMessage) => boolean): string {
  const msg = f.fieldKind === "message" ? f.message : f.fieldKind === "list" && f.listKind === "message" ? f.message : undefined;
  if (msg) return use(msg, needsValid(msg));
  const en = f.fieldKind === "enum" ? f.enum : f.fieldKind === "list" && f.listKind === "enum" ? f.enum : undefined;
  if (en) return use(en, false);
  const scalar = f.fieldKind === "scalar" ? f.scalar : f.fieldKind === "list" && f.listKind === "scalar" ? f.scalar : undefined;
  switch (scalar) {
    case ScalarType.STRING:
      return "string";
    case ScalarType.BOOL:
      return "boolean";
    case ScalarType.BYTES:
      return "Buffer";
    case undefined:
      throw new Error(`protoc-gen-keycap-valid: unsupported field ${f.toString()}`);
    default:
      return "number"; // ts-proto forceLong=number
  }
}

runNodeJs(
  createEcmaScriptPlugin({
    name: "protoc-gen-keycap-valid",
    version: "v1",
    parseOptions,
    generateTs: generate,
  }),
);
