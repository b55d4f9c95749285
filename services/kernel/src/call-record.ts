/**
 * The journaled call as the kernel reads it (CallRecord) and its parts: the one type the journal,
 * the settler and the settle store share, kept apart so none of them imports another for it.
 */
import type { CapabilityClaims, EffectName } from "../../capability/src";

export type CallStateName = "pending" | "completed" | "indeterminate";
export type CallOutcomeName = "succeeded" | "failed";

/**
 * A journaled call as the kernel sees it: the stored journal document merged
 * with its completion, if any. The arguments are kept exactly as received.
 */
export interface CallRecord {
  _id: string;
  tool_id: string;
  run_id: string;
  arguments_json: string;
  effect: EffectName;
  key?: string;
  request_id?: string;
  attempt: number;
  /**
   * Stored: "pending", or "indeterminate" once recovery gave up on an Unsafe
   * call. Read back: "completed" when a completion exists (call_completions).
   */
  state: CallStateName;
  outcome?: CallOutcomeName;
  outcome_detail?: string;
  /** Claims of the current attempt's capability: re-signed (deterministic Ed25519) on a repeated BeginCall. */
  capability: CapabilityClaims;
  created_at: Date;
  updated_at: Date;
  /** The principal that began the call (the capability's `sub`); absent on calls begun before principals existed. */
  principal?: string;
  /**
   * The second of `created_at` (`YYYYMMDDHHmmss`, ADR 0033): the bucket a search by principal
   * reads the call in. Absent on calls journaled before it was kept (not found by principal).
   */
  lb?: string;
  /** The run mode when not live (ADR 0028); absent: live. */
  mode?: "shadow" | "replay";
  /** Replay calls: the recorded run, the recorded call matched and this call's position in its replay run. */
  replay_of_run_id?: string;
  replay_of_call_id?: string;
  replay_position?: number;
  /** Shadow calls: the live run shadowed, when named. */
  shadows_run_id?: string;
  /** Last refused recovery, for operators (e.g. a key that no longer re-derives); `by`: the resuming principal. */
  last_resume_refusal?: { reason: string; message: string; at: Date; by?: string };
  /**
   * Each recovery that moved the call to a next attempt: the attempt, its capability, when
   * and by whom (the newest RESUMES_KEPT; absent on calls never resumed or resumed before it was kept).
   */
  resumes?: CallResume[];
  /** Read back only, from the completion: when it was recorded and the principal that recorded it. */
  completed_at?: Date;
  completed_by?: string;
}

/** One recovery that re-issued a call's capability. */
export interface CallResume {
  attempt: number;
  capability_id: string;
  at: Date;
  by: string;
}

/** Resumes a call keeps (the newest): a bound on the document, whatever a recovery loop does. */
export const RESUMES_KEPT = 20;
