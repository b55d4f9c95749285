/**
 * The kernel's wire mapping: its results as the proto messages of kernel.proto, and the
 * enums of requests as the service's names. Nothing here decides anything.
 */
import { CallOutcome, CallState, ResumeAction, type BeginCallResponse, type Call, type ResumeCallResponse } from "../../../gen/ts/keycap/kernel/v1/kernel";
import { effectKindOf } from "../../common/src/effect-kind";
import { Reasons, refuse } from "../../common/src/refuse";
import type { CallOutcomeName, CallRecord } from "./call-journal";
import type { BegunCall, ResumeOutcome } from "./kernel";

/** A journal record as the wire Call. */
export function callToProto(c: CallRecord): Call {
  return {
    callId: c._id,
    toolId: c.tool_id,
    runId: c.run_id,
    argumentsJson: c.arguments_json,
    effectKind: effectKindOf(c.effect),
    key: c.key ?? "",
    requestId: c.request_id ?? "",
    attempt: c.attempt,
    state: c.state === "pending" ? CallState.CALL_STATE_PENDING : c.state === "completed" ? CallState.CALL_STATE_COMPLETED : CallState.CALL_STATE_INDETERMINATE,
    outcome:
      c.outcome === "succeeded"
        ? CallOutcome.CALL_OUTCOME_SUCCEEDED
        : c.outcome === "failed"
          ? CallOutcome.CALL_OUTCOME_FAILED
          : CallOutcome.CALL_OUTCOME_UNSPECIFIED,
    outcomeDetail: c.outcome_detail ?? "",
    createdAt: c.created_at,
    updatedAt: c.updated_at,
    principal: c.principal ?? "",
  };
}

export function begunToProto(b: BegunCall): BeginCallResponse {
  return { call: callToProto(b.call), capability: b.capability.token, capabilityExpiresAt: b.capability.expiresAt, existingCall: b.existing };
}

const RESUME_ACTIONS: Record<ResumeOutcome["action"], ResumeAction> = {
  already_completed: ResumeAction.RESUME_ACTION_ALREADY_COMPLETED,
  done: ResumeAction.RESUME_ACTION_DONE,
  left_pending: ResumeAction.RESUME_ACTION_LEFT_PENDING,
  retry: ResumeAction.RESUME_ACTION_RETRY,
};

export function resumedToProto(r: ResumeOutcome): ResumeCallResponse {
  const capability =
    r.action === "retry" ? { capability: r.capability.token, capabilityExpiresAt: r.capability.expiresAt } : { capability: "", capabilityExpiresAt: undefined };
  return { call: callToProto(r.call), action: RESUME_ACTIONS[r.action], ...capability };
}

/** CompleteCall's outcome by name; an unset or unknown one is refused. */
export function outcomeFromProto(outcome: CallOutcome): CallOutcomeName {
  if (outcome === CallOutcome.CALL_OUTCOME_SUCCEEDED) return "succeeded";
  if (outcome === CallOutcome.CALL_OUTCOME_FAILED) return "failed";
  throw refuse(Reasons.OUTCOME_REQUIRED, "outcome is required: CALL_OUTCOME_SUCCEEDED or CALL_OUTCOME_FAILED", { field: "outcome" });
}
