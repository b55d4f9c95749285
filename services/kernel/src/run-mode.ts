/**
 * Run modes (ADR 0028, DESIGN §12): what BeginCall's mode fields may say together (rules
 * across fields, checked here per call), and what each mode means for the key's context
 * and the capability's `mode` claim.
 */
import type { SandboxMode } from "../../capability/src";
import { Reasons, refuse } from "../../common/src/refuse";

/** A call's run mode; "live" is what keycap did before modes existed. */
export type RunModeName = "live" | "shadow" | "replay";

/** The mode fields of a BeginCall. */
export interface RunModeInput {
  mode: RunModeName;
  /** REPLAY only, required there: the recorded run. */
  replayOfRunId: string;
  /** SHADOW only, optional: the live run shadowed. */
  shadowsRunId: string;
}

/**
 * Refuses INVALID_RUN_MODE a replay without the recorded run or its own run id (its calls'
 * positions are counted per run), and ids given to a mode that does not take them. (The
 * ids' lengths are rules of BeginCallRequest in kernel.proto.)
 */
export function checkRunMode(req: RunModeInput & { runId: string }): void {
  const bad = (message: string, field: string): Error => refuse(Reasons.INVALID_RUN_MODE, message, { field, mode: req.mode });
  if (req.mode === "replay") {
    if (req.replayOfRunId === "") throw bad("a replay call must name the recorded run (replay_of_run_id)", "replay_of_run_id");
    if (req.runId === "") throw bad("a replay call needs its own run_id: its position is counted in that run", "run_id");
    if (req.runId === req.replayOfRunId) throw bad("a replay run needs a run_id of its own, not the recorded run's", "run_id");
  } else if (req.replayOfRunId !== "") {
    throw bad("replay_of_run_id is for RUN_MODE_REPLAY only", "replay_of_run_id");
  }
  if (req.mode !== "shadow" && req.shadowsRunId !== "") throw bad("shadows_run_id is for RUN_MODE_SHADOW only", "shadows_run_id");
}

/** The capability's `mode` claim: none for live. */
export function sandboxModeOf(mode: RunModeName | undefined): SandboxMode | undefined {
  return mode === "shadow" || mode === "replay" ? mode : undefined;
}

/** The run id the key is derived with: a replay derives in the recorded run's context. */
export function derivationRunId(req: { mode: RunModeName; runId: string; replayOfRunId: string }): string {
  return req.mode === "replay" ? req.replayOfRunId : req.runId;
}
