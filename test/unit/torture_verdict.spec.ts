/**
 * The torture worker logs a failed recovery step's code and reason from the client
 * error's summary; the verdict counts only retryable codes as expected. Read with the
 * colon ("UNAVAILABLE:"), a retryable failure counted as unexpected.
 */
import { expect } from "chai";
import { stepError } from "../torture/verdict";

describe("torture verdict: a recovery step's error", function () {
  it("reads the code and reason of every summary form without the colon", function () {
    expect(stepError("UNAVAILABLE LEDGER_UNAVAILABLE: cannot ask the ledger (ECONNREFUSED)")).to.deep.equal({
      code: "UNAVAILABLE",
      reason: "LEDGER_UNAVAILABLE",
    });
    expect(stepError("DEADLINE_EXCEEDED: Deadline exceeded after 10.009s")).to.deep.equal({ code: "DEADLINE_EXCEEDED", reason: "" });
    expect(stepError("ABORTED CALL_IN_PROGRESS")).to.deep.equal({ code: "ABORTED", reason: "CALL_IN_PROGRESS" });
    expect(stepError("UNAVAILABLE")).to.deep.equal({ code: "UNAVAILABLE", reason: "" });
  });
});
