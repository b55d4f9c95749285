/**
 * A warning a client can cause with every request is logged the first time, then at most once a
 * minute with how many came since: one misconfigured client cannot flood the log.
 */
import { expect } from "chai";
import type { Logger } from "../../services/common/src/logger";
import { SummarizedWarning } from "../../services/common/src/summarized-warning";

describe("summarized warning", () => {
  it("logs the first occurrences at once, sums those within the minute, and logs the sum with the next after it", () => {
    const lines: Array<{ fields: object; message: string }> = [];
    const logger: Logger = {
      debug: () => {},
      info: () => {},
      warn: (fields, message) => lines.push({ fields, message }),
      error: () => {},
      child: () => logger,
    };
    let now = 1_000_000;
    const w = new SummarizedWarning(logger, "receipts ignored", 60_000, () => now);
    w.add(0);
    expect(lines).to.deep.equal([]);
    w.add(2);
    expect(lines).to.deep.equal([{ fields: { occurrences: 2, within_ms: 0 }, message: "receipts ignored" }]);
    for (let i = 0; i < 100; i++) {
      now += 500;
      w.add(1);
    }
    expect(lines, "held back within the minute").to.have.length(1);
    now += 20_000;
    w.add(3);
    expect(lines[1]).to.deep.equal({ fields: { occurrences: 103, within_ms: 70_000 }, message: "receipts ignored" });
  });
});
