/**
 * The kernel's wire mapping: its results as the proto messages of kernel.proto, and the
 * enums of requests as the service's names. Nothing here decides anything.
 */
import {
  CallOutcome,
  CallState,
  ResumeAction,
  RunMode,
  type BeginCallRequest,
  type BeginCallResponse,
  type Call,
  type GetCallResponse,
  type ResumeCallResponse,
  type SearchCallsRequest,
} from "../../../gen/ts/keycap/kernel/v1/kernel";
import { effectKindOf } from "../../common/src/effect-kind";
import { Reasons, refuse } from "../../common/src/refuse";
import type { CallCriterion, CallOutcomeName, CallRecord } from "./call-journal";
import type { BeginCallInput, BegunCall, ResumeOutcome } from "./kernel";
import type { RunModeName } from "./run-mode";

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
    mode: c.mode === "shadow" ? RunMode.RUN_MODE_SHADOW : c.mode === "replay" ? RunMode.RUN_MODE_REPLAY : RunMode.RUN_MODE_LIVE,
    replayOfRunId: c.replay_of_run_id ?? "",
    shadowsRunId: c.shadows_run_id ?? "",
    replayOfCallId: c.replay_of_call_id ?? "",
    replayPosition: c.replay_position ?? 0,
  };
}

/** BeginCall's request as the service's input; an unknown mode is refused INVALID_RUN_MODE. */
export function beginInputFromProto(r: BeginCallRequest): BeginCallInput {
  return {
    toolId: r.toolId,
    callId: r.callId,
    runId: r.runId,
    argumentsJson: r.argumentsJson,
    mode: modeFromProto(r.mode),
    replayOfRunId: r.replayOfRunId,
    shadowsRunId: r.shadowsRunId,
  };
}

function modeFromProto(mode: RunMode): RunModeName {
  switch (mode) {
    case RunMode.RUN_MODE_UNSPECIFIED:
    case RunMode.RUN_MODE_LIVE:
      return "live";
    case RunMode.RUN_MODE_SHADOW:
      return "shadow";
    case RunMode.RUN_MODE_REPLAY:
      return "replay";
    default:
      throw refuse(Reasons.INVALID_RUN_MODE, `mode ${String(mode)} is not a RunMode`, { field: "mode" });
  }
}

export function begunToProto(b: BegunCall): BeginCallResponse {
  return {
    call: callToProto(b.call),
    capability: b.capability.token,
    capabilityExpiresAt: b.capability.expiresAt,
    existingCall: b.existing,
    recordedCall: b.recorded ? callToProto(b.recorded) : undefined,
  };
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

/** GetCall's answer: the call, who settled it, and its current capability's claims (never the token). */
export function storyToProto(c: CallRecord): GetCallResponse {
  const r = c.last_resume_refusal;
  const settled = c.completed_at !== undefined || r !== undefined;
  return {
    call: callToProto(c),
    settlement: settled
      ? {
          completedAt: c.completed_at,
          completedBy: c.completed_by ?? "",
          recoveryRefusedAt: r?.at,
          recoveryRefusedReason: r?.reason ?? "",
          recoveryRefusedMessage: r?.message ?? "",
          recoveryRefusedBy: r?.by ?? "",
        }
      : undefined,
    capability: {
      capabilityId: c.capability.jti,
      attempt: c.capability.attempt,
      issuedAt: new Date(c.capability.iat * 1000),
      expiresAt: new Date(c.capability.exp * 1000),
    },
    resumes: (c.resumes ?? []).map((r) => ({ attempt: r.attempt, capabilityId: r.capability_id, at: r.at, by: r.by })),
  };
}

const CRITERION_FIELDS = { callId: "_id", runId: "run_id", key: "key", principal: "principal" } as const;

/** SearchCalls' one criterion as the journal's field; none set: undefined (refused by the kernel). */
export function criterionFromProto(r: SearchCallsRequest): CallCriterion | undefined {
  return r.criterion ? { field: CRITERION_FIELDS[r.criterion.$case], value: r.criterion.value } : undefined;
}
