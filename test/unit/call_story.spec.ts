/**
 * A call's story as the CLI and the console tell it (services/common/src/call-story.ts, ADR
 * 0032): previews read as text where they can, the timeline in time order, the journal's
 * copy of a refused recovery told only when the audit has none.
 */
import { expect } from "chai";
import { EffectKind } from "../../gen/ts/keycap/effect/v1/effect";
import { CallOutcome, CallState, RunMode, type Call, type GetCallResponse } from "../../gen/ts/keycap/kernel/v1/kernel";
import type { Rejection } from "../../gen/ts/keycap/ledger/v1/ledger_admin";
import { callStory, payloadPreview } from "../../services/common/src/call-story";

const t = (s: number): Date => new Date(Date.UTC(2026, 0, 1, 0, 0, s));

function call(over: Partial<Call> = {}): Call {
  return {
    callId: "c-1",
    toolId: "t",
    runId: "r",
    argumentsJson: "{}",
    effectKind: EffectKind.EFFECT_KIND_UNSAFE,
    key: "",
    requestId: "",
    attempt: 1,
    state: CallState.CALL_STATE_COMPLETED,
    outcome: CallOutcome.CALL_OUTCOME_FAILED,
    outcomeDetail: "checked",
    createdAt: t(0),
    updatedAt: t(9),
    principal: "rt",
    mode: RunMode.RUN_MODE_LIVE,
    replayOfRunId: "",
    shadowsRunId: "",
    replayOfCallId: "",
    replayPosition: 0,
    ...over,
  };
}

function refusalAt(s: number, reason: string, method: string): Rejection {
  return { rejectedAt: t(s), reason, method, service: "kernel", code: "FAILED_PRECONDITION", count: 1, principal: "rt" } as unknown as Rejection;
}

describe("call story (ADR 0032)", function () {
  it("previews UTF-8 as text, a character cut at the preview's end dropped, other bytes as hex", function () {
    expect(payloadPreview(Buffer.from("héllo"), 6)).to.deep.equal({ text: "héllo", note: "UTF-8, 6 bytes" });
    // "é" is two bytes: a preview cut between them still reads as text.
    expect(payloadPreview(Buffer.from("hé").subarray(0, 2), 3)).to.deep.equal({ text: "h", note: "UTF-8, first 2 of 3 bytes" });
    expect(payloadPreview(Buffer.from([0xff, 0x00]), 2)).to.deep.equal({ text: "ff00", note: "hex, not UTF-8, 2 bytes" });
    expect(payloadPreview(Buffer.alloc(0), 10).note).to.equal("no preview kept");
  });

  it("orders the timeline by time and tells a refused recovery once when the audit recorded it", async function () {
    const got: GetCallResponse = {
      call: call(),
      settlement: {
        completedAt: t(9),
        completedBy: "admin",
        recoveryRefusedAt: t(5),
        recoveryRefusedReason: "UNSAFE_NOT_RESUMABLE",
        recoveryRefusedMessage: "needs an operator",
        recoveryRefusedBy: "rt",
      },
      capability: undefined,
      resumes: [],
    };
    const story = await callStory("c-1", {
      call: async () => got,
      // Newest first, as ListRejections answers.
      refusals: async () => ({
        rejections: [refusalAt(5, "UNSAFE_NOT_RESUMABLE", "ResumeCall"), refusalAt(2, "CALL_ID_CONFLICT", "BeginCall")],
        nextPageToken: "",
      }),
      entry: async () => undefined,
    });
    expect(story!.timeline.map((e) => e.event)).to.deep.equal(["begun", "refused", "refused", "completed"]);
    expect(story!.timeline[3]!.detail).to.equal("failed by admin: checked");
    // Without the audit's record (an older one), the journal's copy is told.
    const older = await callStory("c-1", {
      call: async () => got,
      refusals: async () => ({ rejections: [], nextPageToken: "" }),
      entry: async () => undefined,
    });
    expect(older!.timeline.map((e) => e.event)).to.deep.equal(["begun", "recovery refused", "completed"]);
    expect(
      await callStory("c-2", { call: async () => undefined, refusals: async () => ({ rejections: [], nextPageToken: "" }), entry: async () => undefined }),
    ).to.equal(undefined);
  });
});
