/**
 * How operator commands write: a table for people, or exactly one JSON document with
 * --json, so a script can always parse stdout (the result, or `null` when the command
 * failed or found nothing). Failures are one line on stderr (a JSON object with --json)
 * and an exit status a script can branch on (exit-status.ts).
 */
import Table from "cli-table3";
import { effectKindToJSON, type EffectKind } from "../../../gen/ts/keycap/effect/v1/effect";
import { callOutcomeToJSON, callStateToJSON, type CallOutcome, type CallState } from "../../../gen/ts/keycap/kernel/v1/kernel";
import type { OperatorOptions } from "./operator-context";

/**
 * Whether stdout takes colour: a terminal whose Node colour depth allows it. Node's
 * `hasColors()` already honours NO_COLOR, NODE_DISABLE_COLORS, FORCE_COLOR and
 * TERM=dumb; a pipe or a file never gets escape codes.
 */
export function stdoutHasColour(): boolean {
  return process.stdout.isTTY === true && process.stdout.hasColors();
}

/** A table with the project's look; coloured headers and borders only on a colour terminal. */
export function newTable(head: string[] = []): Table.Table {
  const colour = stdoutHasColour();
  return new Table({ head, style: { head: colour ? ["cyan"] : [], border: colour ? ["grey"] : [] } });
}

/** Writes the result: JSON with --json, else the table (built only when needed). */
export function print(opts: OperatorOptions, json: unknown, table: () => string | Table.Table): void {
  if (opts.json) return void process.stdout.write(jsonText(json) + "\n");
  const t = table();
  process.stdout.write((typeof t === "string" ? t : render(t)) + "\n");
}

export type Print = typeof print;

/** The wire's enums by name in JSON, as the tables show them: a script reads "idempotent", not 1. */
const ENUM_NAMES: Record<string, (n: number) => string> = {
  effectKind: (n) =>
    effectKindToJSON(n as EffectKind)
      .replace("EFFECT_KIND_", "")
      .toLowerCase(),
  state: (n) =>
    callStateToJSON(n as CallState)
      .replace("CALL_STATE_", "")
      .toLowerCase(),
  outcome: (n) =>
    callOutcomeToJSON(n as CallOutcome)
      .replace("CALL_OUTCOME_", "")
      .toLowerCase(),
};

/** A result as --json prints it: bytes in base64, the wire's enums by name. */
export function jsonText(value: unknown): string {
  return JSON.stringify(value ?? null, jsonReplacer, 2);
}

function jsonReplacer(k: string, v: unknown): unknown {
  if (v && typeof v === "object" && (v as { type?: string }).type === "Buffer") return Buffer.from((v as { data: number[] }).data).toString("base64");
  const name = ENUM_NAMES[k];
  if (name && typeof v === "number") return name(v);
  return v;
}

/**
 * Columns a table may take: the terminal's width, else COLUMNS, else 120. A terminal that
 * reports 0 (a pty nobody sized: `script`, some CI runners) has no width to fit.
 */
function availableColumns(): number {
  const fromEnv = Number(process.env["COLUMNS"]);
  const terminal = process.stdout.columns;
  if (terminal !== undefined && terminal > 0) return terminal;
  return Number.isInteger(fromEnv) && fromEnv > 20 ? fromEnv : 120;
}

/** Narrowest a column of free text is made before the table may be wider than the terminal. */
const MIN_COLUMN = 10;

/**
 * The table as text no wider than the terminal where it can be: columns of free text are
 * narrowed and wrap between words; no column gets narrower than its longest word, so an id
 * or key is never cut or split across lines (a table of long ids stays wider than the terminal).
 */
export function render(t: Table.Table, columns = availableColumns()): string {
  const rows = [...(t.options.head.length > 0 ? [t.options.head] : []), ...(t as unknown as unknown[]).map(cellsOf)];
  const count = Math.max(0, ...rows.map((r) => r.length));
  const column = (i: number): string[] => rows.map((r) => r[i] ?? "");
  // +2: cli-table3's padding, one space each side.
  const widths = Array.from({ length: count }, (_, i) => Math.max(1, ...column(i).map(longestLine)) + 2);
  const floors = Array.from({ length: count }, (_, i) => Math.max(MIN_COLUMN, ...column(i).map(longestWord)) + 2);
  let total = widths.reduce((a, b) => a + b, 0) + count + 1;
  if (total <= columns) return t.toString();
  for (;;) {
    const shrinkable = widths.map((w, i) => (w > floors[i]! ? w : -1));
    const widest = shrinkable.indexOf(Math.max(...shrinkable));
    if (total <= columns || shrinkable[widest]! < 0) break;
    widths[widest]! -= 1;
    total -= 1;
  }
  Object.assign(t.options, { colWidths: widths, wordWrap: true, wrapOnWordBoundary: true });
  return t.toString();
}

function cellsOf(row: unknown): string[] {
  if (Array.isArray(row)) return row.map(String);
  if (row && typeof row === "object") return Object.entries(row).flatMap(([k, v]) => [k, String(v)]);
  return [String(row)];
}

function longestWord(text: string): number {
  return Math.max(0, ...text.split(/\s+/).map((w) => [...w].length));
}

function longestLine(text: string): number {
  return Math.max(0, ...text.split("\n").map((l) => [...l].length));
}

/**
 * Tells the reader that a listing stopped at --limit and how to get the next page. On
 * stderr, so the table or the JSON array on stdout stays what it was.
 */
export function printMoreHint(nextPageToken: string): void {
  if (nextPageToken) process.stderr.write(`more results: run the same command with --page ${nextPageToken}\n`);
}
