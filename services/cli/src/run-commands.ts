/**
 * `keycap runs show <run>`: one run's calls in the order they were begun — position, tool,
 * key (or request id), outcome, mode (ADR 0028, docs/run-modes.md). Through the kernel's
 * ListRunCalls, as an operator.
 */
import type { Command } from "commander";
import { KernelClient } from "../../../clients/ts/src";
import { CallOutcome, CallState, RunMode, type RunCall } from "../../../gen/ts/keycap/kernel/v1/kernel";
import { adminToken, explain, kernelAddress, tlsOptions, type OperatorOptions } from "./operator-context";
import type { Print } from "./output";
import { newTable, render } from "./output";

/** One row of `runs show`, also its --json shape. */
export interface RunCallRow {
  position: number;
  callId: string;
  toolId: string;
  key: string;
  requestId: string;
  outcome: string;
  mode: string;
  /** Replay: the recorded call matched. */
  replayOfCallId: string;
  /** The run this one replays (replay) or shadows (shadow); "" for live. */
  ofRun: string;
}

/** Adds `runs show`. */
export function addRunCommands(program: Command, kernelOperator: (c: Command) => Command, print: Print): void {
  const runs = program.command("runs").description("agent runs: their calls in order, with their mode (live, shadow, replay)");
  kernelOperator(runs.command("show").description("one run's calls in the order they were begun: position, tool, key, outcome, mode"))
    .argument("<run>", "the run id given to BeginCall")
    .action(async (runId: string, o: OperatorOptions) => {
      const at = kernelAddress(o);
      const tls = tlsOptions(o);
      const kernel = new KernelClient(at.address, { token: adminToken(o), ...(tls ? { tls } : {}) });
      try {
        const rows = (await kernel.listRunCalls(runId)).map(rowOf);
        print(o, rows, () => (rows.length === 0 ? `no calls in run ${runId}` : runTable(rows)));
      } catch (err) {
        throw explain(err, "kernel", at);
      } finally {
        kernel.close();
      }
    });
}

function runTable(rows: RunCallRow[]): string {
  const t = newTable(["#", "tool", "key / request id", "outcome", "mode", "of run", "call"]);
  for (const r of rows) t.push([String(r.position), r.toolId, r.key || r.requestId || "-", r.outcome, r.mode, r.ofRun || "-", r.callId]);
  return render(t);
}

function rowOf(rc: RunCall): RunCallRow {
  const c = rc.call;
  return {
    position: rc.position,
    callId: c?.callId ?? "",
    toolId: c?.toolId ?? "",
    key: c?.key ?? "",
    requestId: c?.requestId ?? "",
    outcome: outcomeOf(c?.state, c?.outcome),
    mode: c?.mode === RunMode.RUN_MODE_SHADOW ? "shadow" : c?.mode === RunMode.RUN_MODE_REPLAY ? "replay" : "live",
    replayOfCallId: c?.replayOfCallId ?? "",
    ofRun: c?.replayOfRunId || c?.shadowsRunId || "",
  };
}

function outcomeOf(state: CallState | undefined, outcome: CallOutcome | undefined): string {
  if (state === CallState.CALL_STATE_INDETERMINATE) return "indeterminate";
  if (state !== CallState.CALL_STATE_COMPLETED) return "pending";
  return outcome === CallOutcome.CALL_OUTCOME_FAILED ? "failed" : "succeeded";
}
