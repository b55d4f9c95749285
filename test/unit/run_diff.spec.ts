/**
 * `keycap runs diff` (issue 30): how a replay or shadow run is lined up with the recorded or
 * live run, and how each pair is marked.
 */
import { expect } from "chai";
import { diffRuns, type DiffCall } from "../../services/cli/src/run-diff";

let ids = 0;
function call(run: "a" | "b", position: number, toolId: string, over: Partial<DiffCall> = {}): DiffCall {
  return {
    position,
    callId: `${run}-${++ids}`,
    toolId,
    key: "",
    requestId: "",
    argumentsJson: "{}",
    unsafe: toolId === "transfer",
    outcome: "succeeded",
    mode: run === "a" ? "live" : "shadow",
    replayOfRunId: "",
    replayOfCallId: "",
    ...over,
  };
}

describe("keycap runs diff: lining up two runs", () => {
  const recorded = [
    call("a", 0, "charge", { key: "k1" }),
    call("a", 1, "notify", { requestId: "r1" }),
    call("a", 2, "transfer"),
    call("a", 3, "charge", { key: "k2" }),
  ];

  it("lines a replay up by the recorded call each call matched: matches, the Unsafe call denied, a recorded call never replayed missing", () => {
    const replay = [recorded[0]!, recorded[1]!].map((r, i) =>
      call("b", i, r.toolId, { key: r.key, requestId: r.requestId, mode: "replay", replayOfRunId: "rec", replayOfCallId: r.callId }),
    );
    const rows = diffRuns("rec", recorded, replay);
    expect(rows.map((r) => [r.mark, r.a?.callId, r.b?.callId])).to.deep.equal([
      ["match", recorded[0]!.callId, replay[0]!.callId],
      ["match", recorded[1]!.callId, replay[1]!.callId],
      ["denied-unsafe", recorded[2]!.callId, undefined],
      ["missing", recorded[3]!.callId, undefined],
    ]);
  });

  it("lines a shadow run up in order, skipping the live run's Unsafe calls it was denied; same arguments under other keys match, other arguments diverge", () => {
    const shadow = [
      call("b", 0, "charge", { key: "s1", argumentsJson: '{"order_id":"A","amount":1}' }),
      call("b", 1, "notify", { requestId: "r1" }),
      call("b", 2, "charge", { key: "s2", argumentsJson: '{"order_id":"B"}' }),
      call("b", 3, "notify", { requestId: "r9" }),
    ];
    const live = [
      call("a", 0, "charge", { key: "k1", argumentsJson: '{"amount":1,"order_id":"A"}' }),
      call("a", 1, "notify", { requestId: "r1" }),
      call("a", 2, "transfer"),
      call("a", 3, "charge", { key: "k2", argumentsJson: '{"order_id":"C"}' }),
    ];
    expect(diffRuns("live", live, shadow).map((r) => r.mark)).to.deep.equal(["match", "match", "denied-unsafe", "diverged", "extra"]);
  });

  it("marks an Unsafe call of a live run beside another live run as compared, not denied", () => {
    const other = recorded.map((c, i) => call("b", i, c.toolId, { key: c.key, requestId: c.requestId, mode: "live" }));
    expect(diffRuns("rec", recorded, other).map((r) => r.mark)).to.deep.equal(["match", "match", "match", "match"]);
  });
});
