/**
 * The policy file of `keycap mcp`: which upstream MCP servers it fronts and, for each upstream
 * tool, its effect class in keycap's terms. YAML or JSON, validated against the published
 * schema (`policy.schema.json`) at start; every problem names its path in the file.
 */
import Ajv, { type ErrorObject } from "ajv";
import * as fs from "node:fs";
import { parse as parseYaml } from "yaml";
import schema from "./policy.schema.json";

/** How an upstream tool's calls are governed. */
export type ToolPolicy =
  | { class: "idempotent"; key: readonly [string, ...string[]]; keyVersion: number; runScope: boolean }
  | { class: "queryable"; requestId: string; lookupTool?: string }
  | { class: "unsafe" }
  | { class: "read" };

/** How the gateway reaches an upstream: a command it starts (stdio), or a Streamable HTTP URL. */
export type UpstreamTransport = { kind: "stdio"; command: string; args: string[]; env: Record<string, string>; cwd?: string } | { kind: "http"; url: string };

/** One upstream MCP server. */
export interface UpstreamPolicy {
  name: string;
  transport: UpstreamTransport;
  /** Tools the policy names, by the upstream's tool name. */
  tools: Map<string, ToolPolicy>;
}

/** A policy with its defaults applied. */
export interface Policy {
  upstreams: UpstreamPolicy[];
  runId?: string;
  toolNameSeparator: string;
}

/** The policy cannot be used; `problems` each start with the path they concern. */
export class PolicyError extends Error {
  constructor(
    readonly file: string,
    readonly problems: readonly string[],
  ) {
    super(`${file}: the policy cannot be used:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
    this.name = "PolicyError";
  }
}

interface RawTool {
  class: ToolPolicy["class"];
  key?: string[];
  key_version?: number;
  run_scope?: boolean;
  request_id?: string;
  lookup_tool?: string;
}

interface RawPolicy {
  version: 1;
  run_id?: string;
  tool_name_separator?: string;
  upstreams: Record<string, { command?: string; url?: string; args?: string[]; env?: Record<string, string>; cwd?: string; tools?: Record<string, RawTool> }>;
}

const ajv = new Ajv({ allErrors: true });
const validate = ajv.compile<RawPolicy>(schema);

/** The published JSON Schema of the policy file. */
export const POLICY_SCHEMA: object = schema;

/** Reads, parses and validates a policy file. @throws PolicyError naming every problem's path. */
export function loadPolicy(file: string): Policy {
  let text: string;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (err) {
    throw new PolicyError(file, [`cannot read the file (${(err as { code?: string }).code ?? String(err)})`]);
  }
  return parsePolicy(text, file);
}

/** Parses policy text (YAML, of which JSON is a subset). */
export function parsePolicy(text: string, file = "policy"): Policy {
  let doc: unknown;
  try {
    doc = parseYaml(text, { uniqueKeys: true });
  } catch (err) {
    throw new PolicyError(file, [`not YAML or JSON: ${err instanceof Error ? err.message.split("\n")[0] : String(err)}`]);
  }
  if (!validate(doc))
    throw new PolicyError(
      file,
      (validate.errors ?? []).map(describeSchemaError).filter((p, i, all) => p !== "" && all.indexOf(p) === i),
    );
  return {
    upstreams: Object.entries(doc.upstreams).map(([name, u]) => ({
      name,
      transport:
        u.url !== undefined
          ? { kind: "http" as const, url: u.url }
          : { kind: "stdio" as const, command: u.command ?? "", args: u.args ?? [], env: u.env ?? {}, ...(u.cwd !== undefined ? { cwd: u.cwd } : {}) },
      tools: new Map(Object.entries(u.tools ?? {}).map(([tool, t]) => [tool, toolPolicy(t)])),
    })),
    ...(doc.run_id !== undefined ? { runId: doc.run_id } : {}),
    toolNameSeparator: doc.tool_name_separator ?? "__",
  };
}

function toolPolicy(t: RawTool): ToolPolicy {
  switch (t.class) {
    case "idempotent": {
      const [first, ...rest] = t.key ?? [];
      if (first === undefined) throw new Error("schema admitted an idempotent tool without key");
      return { class: "idempotent", key: [first, ...rest], keyVersion: t.key_version ?? 1, runScope: t.run_scope ?? false };
    }
    case "queryable":
      return { class: "queryable", requestId: t.request_id ?? "", ...(t.lookup_tool !== undefined ? { lookupTool: t.lookup_tool } : {}) };
    case "unsafe":
      return { class: "unsafe" };
    case "read":
      return { class: "read" };
  }
}

/** One schema violation as `<path>: <what is wrong>`, the path in the file's own terms (upstreams.x.tools.y.key). */
function describeSchemaError(e: ErrorObject): string {
  const segments = e.instancePath
    .split("/")
    .slice(1)
    .map((s) => s.replace(/~1/g, "/").replace(/~0/g, "~"));
  const where = segments.length ? segments.join(".") : "(top level)";
  const isUpstream = segments.length === 2 && segments[0] === "upstreams";
  const params = e.params as Record<string, unknown>;
  switch (e.keyword) {
    case "required":
      if (isUpstream && e.schemaPath.includes("oneOf")) return `${where}: give either command (with args, env, cwd) or url`;
      return `${where}: ${String(params["missingProperty"])} is required`;
    case "additionalProperties":
      return `${where}: unknown field ${String(params["additionalProperty"])}`;
    case "enum":
      return `${where}: must be one of ${JSON.stringify(params["allowedValues"])}`;
    case "const":
      return `${where}: must be ${JSON.stringify(params["allowedValue"])}`;
    case "pattern":
      return `${where}: ${e.message ?? "does not match the pattern"}${e.instancePath.includes("/key") || e.instancePath.endsWith("/request_id") ? ' (an RFC 6901 JSON Pointer such as "/path")' : ""}`;
    case "not":
      return isUpstream
        ? `${where}: give either command (with args, env, cwd) or url, not both`
        : `${where}: has a field its class does not take (key, key_version and run_scope belong to idempotent; request_id and lookup_tool to queryable)`;
    case "if":
    case "oneOf":
      return "";
    default:
      return `${where}: ${e.message ?? e.keyword}`;
  }
}
