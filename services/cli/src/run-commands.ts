/**
 * `keycap runs show <run>`: one run's calls in the order they were begun — position, tool,
 * key (or request id), outcome, mode (ADR 0028, docs/run-modes.md). `keycap runs diff <a> <b>`:
 * a replay or shadow run lined up with the recorded or live one (run-diff.ts). Through the
 * kernel's ListRunCalls, as an operator.
 */
import type { Command } from "commander";
import type { RunCall } from "../../../gen/ts/keycap/kernel/v1/kernel";
import { runCallView, type RunCallView } from "../../common/src/run-view";
import { EffectKind } from "../../../gen/ts/keycap/effect/v1/effect";
import { diffRuns, type DiffCall, type DiffRow } from "./run-diff";
import { withOperatorKernel, type OperatorOptions } from "./operator-context";
import type { Print } from "./output";
import { newTable, render } from "./output";

/** One row of `runs show`, also its --json shape. */
export type RunCallRow = RunCallView;

/** Adds `runs show` and `runs diff`. */
export function addRunCommands(program: Command, kernelOperator: (c: Command) => Command, print: Print): void {
  const runs = program.command("runs").description("agent runs: their calls in order, with their mode (live, shadow, replay)");
  kernelOperator(runs.command("show").description("one run's calls in the order they were begun: position, tool, key, outcome, mode"))
    .argument("<run>", "the run id given to BeginCall")
    .action(async (runId: string, o: OperatorOptions) => {
      const rows = (await withOperatorKernel(o, (kernel) => kernel.listRunCalls(runId))).map(runCallView);
      print(o, rows, () => (rows.length === 0 ? `no calls in run ${runId}` : runTable(rows)));
    });
  kernelOperator(
    runs.command("diff").description("a replay or shadow run (b) lined up with the recorded or live run (a): match, diverged, denied-unsafe, missing, extra"),
  )
    .argument("<run-a>", "the recorded or live run")
    .argument("<run-b>", "the replay or shadow run (or any other run)")
    .action(async (runA: string, runB: string, o: OperatorOptions) => {
      const [a, b] = await withOperatorKernel(o, (kernel) => Promise.all([kernel.listRunCalls(runA), kernel.listRunCalls(runB)]));
      const rows = diffRuns(runA, a.map(diffCallOf), b.map(diffCallOf));
      // The arguments are what the marks were decided on; like `runs show`, the output leaves them out.
      const json = rows.map((r) => ({ mark: r.mark, ...(r.a ? { a: withoutArguments(r.a) } : {}), ...(r.b ? { b: withoutArguments(r.b) } : {}) }));
      print(o, json, () => (rows.length === 0 ? `no calls in run ${runA} or run ${runB}` : `${diffTable(rows)}\n${summary(rows)}`));
    });
}

function diffTable(rows: DiffRow[]): string {
  const t = newTable(["a #", "b #", "tool", "key / request id", "a outcome", "b outcome", "mark"]);
  const side = (c: DiffCall | undefined, f: (c: DiffCall) => string): string => (c ? f(c) : "-");
  for (const r of rows) {
    const tool = r.a && r.b && r.a.toolId !== r.b.toolId ? `${r.a.toolId} / ${r.b.toolId}` : (r.a ?? r.b)!.toolId;
    const c = (r.a ?? r.b)!;
    t.push([
      side(r.a, (x) => String(x.position)),
      side(r.b, (x) => String(x.position)),
      tool,
      c.key || c.requestId || "-",
      side(r.a, (x) => x.outcome),
      side(r.b, (x) => x.outcome),
      r.mark,
    ]);
  }
  return render(t);
}

function withoutArguments(c: DiffCall): Omit<DiffCall, "argumentsJson"> {
  const { argumentsJson: _, ...rest } = c;
  return rest;
}

function summary(rows: DiffRow[]): string {
  const counts = new Map<string, number>();
  for (const r of rows) counts.set(r.mark, (counts.get(r.mark) ?? 0) + 1);
  return [...counts].map(([mark, n]) => `${n} ${mark}`).join(", ");
}

function diffCallOf(rc: RunCall): DiffCall {
  const row = runCallView(rc);
  return {
    position: row.position,
    callId: row.callId,
    toolId: row.toolId,
    key: row.key,
    requestId: row.requestId,
    argumentsJson: rc.call?.argumentsJson ?? "",
    unsafe: rc.call?.effectKind === EffectKind.EFFECT_KIND_UNSAFE,
    outcome: row.outcome,
    mode: row.mode as DiffCall["mode"],
    replayOfRunId: rc.call?.replayOfRunId ?? "",
    replayOfCallId: row.replayOfCallId,
  };
}

function runTable(rows: RunCallRow[]): string {
  const t = newTable(["#", "tool", "key / request id", "outcome", "mode", "of run", "call"]);
  for (const r of rows) t.push([String(r.position), r.toolId, r.key || r.requestId || "-", r.outcome, r.mode, r.ofRun || "-", r.callId]);
  return render(t);
}
