/**
 * How operator commands write: a table for people, or exactly one JSON document with
 * --json, so a script can always parse stdout (the result, or `null` when the command
 * failed or found nothing). Failures are one line on stderr (a JSON object with --json)
 * and an exit status a script can branch on (exit-status.ts).
 */
import Table from "cli-table3";
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
export function print(opts: OperatorOptions, json: unknown, table: () => string): void {
  process.stdout.write(opts.json ? JSON.stringify(json ?? null, jsonReplacer, 2) + "\n" : table() + "\n");
}

export type Print = typeof print;

function jsonReplacer(_k: string, v: unknown): unknown {
  if (v && typeof v === "object" && (v as { type?: string }).type === "Buffer") return Buffer.from((v as { data: number[] }).data).toString("base64");
  return v;
}

/**
 * Tells the reader that a listing stopped at --limit and how to get the next page. On
 * stderr, so the table or the JSON array on stdout stays what it was.
 */
export function printMoreHint(nextPageToken: string): void {
  if (nextPageToken) process.stderr.write(`more results: run the same command with --page ${nextPageToken}\n`);
}
