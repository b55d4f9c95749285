import { expect } from "chai";
import { formatSpread, interleavedPlan, median, spreadOf } from "../../bench/repetitions";
import { checkTargets, type RunResult } from "../../bench/report";
import { benchRow } from "../support/bench-rows";

/** The whole call at c=16 with this p99 (the p99 target's row reads nothing else). */
const callRun = (p99: number, rep?: number): RunResult => benchRow("call", 16, 1000, p99, rep);

describe("bench repetitions (issue 11): ratios per repetition, median and range", function () {
  it("takes the median of odd and even counts and ignores values from a side that did not run", function () {
    expect(median([3, 1, 2])).to.equal(2);
    expect(median([4, 1, 3, 2])).to.equal(2.5);
    expect(median([Number.NaN, 5])).to.equal(5);
    expect(median([])).to.be.NaN;
  });

  it("reports the median with the range of the repetitions, so one noisy repetition widens the range, not the result", function () {
    const s = spreadOf([0.86, 0.7, 1.23, 0.9, 0.84]);
    expect(s).to.deep.equal({ median: 0.86, min: 0.7, max: 1.23, reps: 5 });
    expect(formatSpread(s)).to.equal("0.86 (0.70–1.23)");
    expect(formatSpread(spreadOf([0.5]))).to.equal("0.50");
    expect(spreadOf([Number.NaN])).to.equal(undefined);
  });

  it("interleaves: every scenario of every level runs once before any runs a second time", function () {
    const plan = interleavedPlan(2, [1, 64], (c) => (c === 1 ? ["base", "write"] : ["base", "write", "call"]));
    expect(plan.map((p) => `${p.rep}:${p.level}:${p.scenario}`)).to.deep.equal([
      "0:1:base",
      "0:1:write",
      "0:64:base",
      "0:64:write",
      "0:64:call",
      "1:1:base",
      "1:1:write",
      "1:64:base",
      "1:64:write",
      "1:64:call",
    ]);
  });

  it("shows each repetition's p99 beside the pooled one, so a repetition over the target is not hidden by the pool", function () {
    const pooled = [callRun(43)];
    const row = (reps: RunResult[]) => checkTargets(pooled, [], undefined, undefined, reps).find((t) => t.target.startsWith("whole call p99"));
    expect(row([callRun(39.7, 0), callRun(53.3, 1), { ...callRun(90, 0), concurrency: 64 }])).to.deep.include({
      measured: "43.0 ms (repetitions 39.7, 53.3 ms)",
      met: true,
    });
    expect(row([callRun(43, 0)])?.measured, "one repetition: nothing to add").to.equal("43.0 ms");
  });
});
