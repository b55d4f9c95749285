/**
 * One call of an agent run as operators read it (`keycap runs show`, the console's run page):
 * its position in the run, tool, key or request id, outcome, mode, and the run it replays or
 * shadows (ADR 0028).
 */
import { CallOutcome, CallState, RunMode, type RunCall } from "../../../gen/ts/keycap/kernel/v1/kernel";

export interface RunCallView {
  position: number;
  callId: string;
  toolId: string;
  key: string;
  requestId: string;
  /** pending, succeeded, failed or indeterminate. */
  outcome: string;
  /** live, shadow or replay. */
  mode: string;
  /** Replay: the recorded call matched. */
  replayOfCallId: string;
  /** The run this one replays (replay) or shadows (shadow); "" for live. */
  ofRun: string;
}

export function runCallView(rc: RunCall): RunCallView {
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
