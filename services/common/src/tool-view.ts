/**
 * A registered tool as operators read it (`keycap tools`, the console's tool page): its effect
 * class and derivation by name, the argument schema parsed — what an operator needs to judge a
 * KEY_MISMATCH or a payload mismatch.
 */
import type { Tool } from "../../../gen/ts/keycap/kernel/v1/kernel";

export interface ToolView {
  toolId: string;
  effectClass: string;
  keyFields: string[];
  derivationVersion: number;
  contextFields: string[];
  requestIdField: string;
  owner: string;
  argumentsSchema: unknown;
  httpDestination: string;
}

export function toolView(t: Tool): ToolView {
  const k = t.effectClass?.kind;
  const key = k?.$case === "idempotent" ? k.value.key : undefined;
  return {
    toolId: t.toolId,
    effectClass: k?.$case ?? "unspecified",
    keyFields: key?.fields ?? [],
    derivationVersion: key?.version ?? 0,
    contextFields: (key?.contextFields ?? []).map(() => "run_id"),
    requestIdField: k?.$case === "queryable" ? (k.value.lookup?.requestIdField ?? "") : "",
    owner: t.owner,
    argumentsSchema: t.argumentsSchemaJson === "" ? undefined : (JSON.parse(t.argumentsSchemaJson) as unknown),
    httpDestination: t.httpDestination ? `${t.httpDestination.methods.join(",")} ${t.httpDestination.baseUrl}` : "",
  };
}
