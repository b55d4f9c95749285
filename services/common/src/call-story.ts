/**
 * A call's whole story (issue 33 item 4, ADR 0032), as `keycap calls show` and the console's
 * call page tell it: the call as the kernel journaled it (GetCall), every refusal that names
 * it (the refusal audit, by call id) and the entry under its key with the payload hash of the
 * first write and of each write that differed (GetEntry). Assembled by the reader from those
 * three reads; nothing here talks to a service itself, so the CLI and the console tell the
 * same story.
 */
import { effectKindToJSON } from "../../../gen/ts/keycap/effect/v1/effect";
import { CallOutcome, CallState, RunMode, type GetCallResponse } from "../../../gen/ts/keycap/kernel/v1/kernel";
import type { EntryWrite, GetEntryResponse, ListRejectionsResponse } from "../../../gen/ts/keycap/ledger/v1/ledger_admin";

/** Refusals a story lists, newest first; more are counted as truncated (the refusal list pages on). */
export const STORY_REFUSALS = 50;

/** Where a story's parts come from (the caller's clients, with its credential). */
export interface StorySources {
  call(callId: string): Promise<GetCallResponse | undefined>;
  /** The newest refusals naming the call, at most `limit`. */
  refusals(callId: string, limit: number): Promise<ListRejectionsResponse>;
  /** The entry under an idempotency key with its writes; undefined when nothing was written under it. */
  entry(key: string): Promise<GetEntryResponse | undefined>;
}

/** A payload's first bytes as a person reads them: text when UTF-8, else hex. */
export interface PayloadPreview {
  text: string;
  /** "UTF-8" or "hex", and how much of the payload this is. */
  note: string;
}

export interface StoryWrite {
  first: boolean;
  payloadMismatch: boolean;
  payloadSha256: string;
  payloadSize: number;
  preview: PayloadPreview;
  callId: string;
  attempt: number;
  capabilityId: string;
  at: Date | undefined;
}

export interface StoryRefusal {
  at: Date | undefined;
  service: string;
  method: string;
  reason: string;
  code: string;
  principal: string;
  toolId: string;
  attemptedKey: string;
  boundKey: string;
  message: string;
  count: number;
}

/** One line of the timeline, oldest first. */
export interface StoryEvent {
  at: Date | undefined;
  event: "begun" | "capability" | "refused" | "write" | "recovery refused" | "completed";
  detail: string;
}

export interface CallStory {
  callId: string;
  toolId: string;
  runId: string;
  principal: string;
  effectClass: string;
  mode: string;
  argumentsJson: string;
  key: string;
  requestId: string;
  state: "pending" | "completed" | "indeterminate";
  outcome: string;
  outcomeDetail: string;
  begunAt: Date | undefined;
  attempt: number;
  capabilityId: string;
  capabilityExpiresAt: Date | undefined;
  /** Each recovery that re-issued the capability (the newest 20 kept by the kernel). */
  resumes: { attempt: number; capabilityId: string; at: Date | undefined; by: string }[];
  completedAt: Date | undefined;
  completedBy: string;
  recoveryRefused: { at: Date | undefined; reason: string; message: string; by: string } | undefined;
  refusals: StoryRefusal[];
  /** More refusals name the call than are listed. */
  refusalsTruncated: boolean;
  entry: { entryId: string; callId: string; recordedAt: Date | undefined; duplicates: number; payloadMismatches: number; writes: StoryWrite[] } | undefined;
  timeline: StoryEvent[];
}

/** The call's story, or undefined when the kernel has no such call. */
export async function callStory(callId: string, src: StorySources): Promise<CallStory | undefined> {
  const got = await src.call(callId);
  const c = got?.call;
  if (!got || !c) return undefined;
  const [refusals, entry] = await Promise.all([src.refusals(callId, STORY_REFUSALS), c.key ? src.entry(c.key) : Promise.resolve(undefined)]);
  const s = got.settlement;
  const story: CallStory = {
    callId: c.callId,
    toolId: c.toolId,
    runId: c.runId,
    principal: c.principal,
    effectClass: effectKindToJSON(c.effectKind).replace("EFFECT_KIND_", "").toLowerCase(),
    mode: c.mode === RunMode.RUN_MODE_SHADOW ? "shadow" : c.mode === RunMode.RUN_MODE_REPLAY ? "replay" : "live",
    argumentsJson: c.argumentsJson,
    key: c.key,
    requestId: c.requestId,
    state: c.state === CallState.CALL_STATE_COMPLETED ? "completed" : c.state === CallState.CALL_STATE_INDETERMINATE ? "indeterminate" : "pending",
    outcome: c.outcome === CallOutcome.CALL_OUTCOME_SUCCEEDED ? "succeeded" : c.outcome === CallOutcome.CALL_OUTCOME_FAILED ? "failed" : "",
    outcomeDetail: c.outcomeDetail,
    begunAt: c.createdAt,
    attempt: c.attempt,
    capabilityId: got.capability?.capabilityId ?? "",
    capabilityExpiresAt: got.capability?.expiresAt,
    resumes: got.resumes.map((r) => ({ attempt: r.attempt, capabilityId: r.capabilityId, at: r.at, by: r.by })),
    completedAt: s?.completedAt,
    completedBy: s?.completedBy ?? "",
    recoveryRefused: s?.recoveryRefusedReason
      ? { at: s.recoveryRefusedAt, reason: s.recoveryRefusedReason, message: s.recoveryRefusedMessage, by: s.recoveryRefusedBy }
      : undefined,
    refusals: refusals.rejections.map((r) => ({
      at: r.rejectedAt,
      service: r.service || "ledger",
      method: r.method,
      reason: r.reason,
      code: r.code,
      principal: r.principal,
      toolId: r.toolId,
      attemptedKey: r.attemptedKey || r.attemptedRequestId,
      boundKey: r.capabilityKey || r.capabilityRequestId,
      message: r.message,
      count: Number(r.count) || 1,
    })),
    refusalsTruncated: refusals.nextPageToken !== "",
    entry: entry?.entry
      ? {
          entryId: entry.entry.entryId,
          callId: entry.entry.callId,
          recordedAt: entry.entry.recordedAt,
          duplicates: Number(entry.entry.duplicateCount),
          payloadMismatches: Number(entry.entry.payloadMismatchCount),
          writes: entry.writes.map(storyWrite),
        }
      : undefined,
    timeline: [],
  };
  story.timeline = timelineOf(story);
  return story;
}

/** One write under an entry's key as a story tells it: its preview readable. */
export function storyWrite(w: EntryWrite): StoryWrite {
  return {
    first: w.first,
    payloadMismatch: w.payloadMismatch,
    payloadSha256: w.payloadSha256,
    payloadSize: Number(w.payloadSize),
    preview: payloadPreview(w.payloadPreview, Number(w.payloadSize)),
    callId: w.callId,
    attempt: w.attempt,
    capabilityId: w.capabilityId,
    at: w.at,
  };
}

/** The story's events in time order (the begin first when times tie). */
function timelineOf(s: CallStory): StoryEvent[] {
  const events: StoryEvent[] = [
    {
      at: s.begunAt,
      event: "begun",
      detail: `by ${s.principal || "(unknown principal)"}${s.runId ? ` in run ${s.runId}` : ""}, ${s.effectClass}${s.key ? `, key ${s.key}` : ""}${s.requestId ? `, request id ${s.requestId}` : ""}${s.mode !== "live" ? ` (${s.mode})` : ""}`,
    },
  ];
  for (const r of s.resumes) {
    events.push({ at: r.at, event: "capability", detail: `attempt ${r.attempt}: resumed by ${r.by || "(unknown)"}, capability ${r.capabilityId}` });
  }
  // Resumed before resumes were kept: the count is all there is to tell.
  if (s.attempt > 1 && s.resumes.length === 0) {
    events.push({ at: undefined, event: "capability", detail: `attempt ${s.attempt}: resumed ${s.attempt - 1} time(s); current capability ${s.capabilityId}` });
  }
  for (const r of [...s.refusals].reverse()) {
    const who = r.principal ? ` (principal ${r.principal})` : "";
    events.push({ at: r.at, event: "refused", detail: `${r.reason} (${r.code}) by ${r.service}${r.method ? ` ${r.method}` : ""}${who}: ${r.message}` });
  }
  for (const w of s.entry?.writes ?? []) {
    const what = w.first ? "first write, entry created" : "write with a different payload (original kept)";
    events.push({ at: w.at, event: "write", detail: `${what}: sha256 ${w.payloadSha256}, ${w.payloadSize} bytes, call ${w.callId} attempt ${w.attempt}` });
  }
  const r = s.recoveryRefused;
  // The audit records a refused ResumeCall too (older records aside): the journal's copy is told only when it is missing there.
  if (r && !s.refusals.some((x) => x.method === "ResumeCall" && x.reason === r.reason)) {
    events.push({ at: r.at, event: "recovery refused", detail: `${r.reason}${r.by ? ` (resumed by ${r.by})` : ""}: ${r.message}` });
  }
  if (s.completedAt) {
    events.push({
      at: s.completedAt,
      event: "completed",
      detail: `${s.outcome} by ${s.completedBy || "(not recorded)"}${s.outcomeDetail ? `: ${s.outcomeDetail}` : ""}`,
    });
  }
  // The capability line has no time of its own: it follows the begin.
  const t = (e: StoryEvent): number => e.at?.getTime() ?? s.begunAt?.getTime() ?? 0;
  return events
    .map((e, i) => ({ e, i }))
    .sort((a, b) => t(a.e) - t(b.e) || a.i - b.i)
    .map(({ e }) => e);
}

/** The first bytes of a payload as text when they are UTF-8 (a cut character at the end is dropped), else hex. */
export function payloadPreview(bytes: Uint8Array, size: number): PayloadPreview {
  const cut = size > bytes.length ? `first ${bytes.length} of ${size} bytes` : `${bytes.length} bytes`;
  if (bytes.length === 0 && size > 0) return { text: "", note: "no preview kept" };
  for (let drop = 0; drop <= 3 && drop <= bytes.length; drop++) {
    // A preview cut inside a multi-byte character still reads as text without its last bytes.
    if (drop > 0 && size === bytes.length) break;
    try {
      return { text: new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(0, bytes.length - drop)), note: `UTF-8, ${cut}` };
    } catch {
      continue;
    }
  }
  return { text: Buffer.from(bytes).toString("hex"), note: `hex, not UTF-8, ${cut}` };
}
