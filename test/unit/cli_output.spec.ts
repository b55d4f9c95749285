/**
 * Issue 33 item 5: operator tables fit the terminal without cutting anything (ids stay whole
 * on one line; free text wraps between words), and --json names the wire's enums as the
 * tables do.
 */
import { expect } from "chai";
import { EffectKind } from "../../gen/ts/keycap/effect/v1/effect";
import { CallOutcome, CallState } from "../../gen/ts/keycap/kernel/v1/kernel";
import { jsonText, newTable, render } from "../../services/cli/src/output";

const KEY = "q0Jm8Jg1e7Q2mZb0k5GfXw3sV9uTzR4yLhP6aNcDxE1";
const DETAIL =
  "the tool's handler is not loaded: pass --handlers with a module exporting tools, or settle it with keycap complete <call> --outcome succeeded|failed once you know";

function lines(text: string): string[] {
  return text.split("\n");
}

describe("keycap CLI output (issue 33 item 5)", () => {
  it("narrows a free-text column to fit the terminal, wrapping between words, never cutting", () => {
    const t = newTable(["key", "action", "detail"]);
    t.push([KEY, "retry", DETAIL]);
    const out = render(t, 100);
    expect(Math.max(...lines(out).map((l) => [...l].length))).to.be.at.most(100);
    expect(out).to.not.include("…");
    expect(
      lines(out).some((l) => l.includes(KEY)),
      "the key whole on one line",
    ).to.equal(true);
    const words = lines(out)
      .map((l) => l.split("│")[3]?.trim() ?? "")
      .join(" ")
      .split(/\s+/)
      .filter(Boolean);
    expect(words.join(" ")).to.equal(`detail ${DETAIL}`);
  });

  it("leaves a table that fits as it is, and never splits an id even when the ids alone are wider than the terminal", () => {
    const fits = newTable(["a", "b"]);
    fits.push(["x", "y"]);
    expect(render(fits, 100)).to.equal(fits.toString());
    const ids = newTable(["key", "key"]);
    ids.push([KEY, KEY]);
    expect(lines(render(ids, 40)).filter((l) => l.includes(KEY))).to.have.length(1);
  });

  it("prints effect classes, call states and outcomes by name in JSON", () => {
    const call = {
      callId: "c",
      effectKind: EffectKind.EFFECT_KIND_IDEMPOTENT,
      state: CallState.CALL_STATE_INDETERMINATE,
      outcome: CallOutcome.CALL_OUTCOME_FAILED,
    };
    expect(JSON.parse(jsonText([call]))).to.deep.equal([{ callId: "c", effectKind: "idempotent", state: "indeterminate", outcome: "failed" }]);
    expect(JSON.parse(jsonText({ payload: Buffer.from("hi") }))).to.deep.equal({ payload: "aGk=" });
  });
});
