import { expect } from "chai";
import { escapeHtml, html } from "../../services/console/src/html";
import { bucketRefusals, chartWindow, refusalChart } from "../../services/console/src/refusal-chart";

describe("console rendering: every value is escaped, the chart counts what it is given", function () {
  it("escapes interpolated text in content and attributes, and keeps markup built by html", function () {
    const evil = `"><script>alert(1)</script><img src=x onerror='x'>\``;
    const out = html`<a title="${evil}">${evil}</a>${html`<b>${"&"}</b>`}`.text;
    expect(out).to.not.include("<script").and.not.include("<img").and.not.include(`"><`);
    expect(out).to.include("&lt;script&gt;").and.include("&quot;").and.include("&#39;").and.include("&#96;");
    expect(out.endsWith("<b>&amp;</b>")).to.equal(true);
    expect(escapeHtml("a&b")).to.equal("a&amp;b");
  });

  it("buckets refusals by reason into the window (a summary counts for its refusals) and draws their total", function () {
    const w = chartWindow("1h");
    const end = Date.UTC(2026, 11, 3, 12, 0, 0);
    const b = bucketRefusals(
      [
        { at: new Date(end - 60_000), reason: "KEY_MISMATCH", count: 1 },
        { at: new Date(end - 61_000), reason: "<b>RATE</b>", count: 40 },
        { at: new Date(end - 2 * 3_600_000), reason: "EXPIRED", count: 1 }, // outside the window
      ],
      w,
      end,
    );
    expect(b.counts).to.have.length(12);
    expect(b.reasons).to.deep.equal(["<b>RATE</b>", "KEY_MISMATCH"]);
    expect(b.counts.reduce((a, m) => a + [...m.values()].reduce((x, y) => x + y, 0), 0)).to.equal(41);
    const svg = refusalChart(b, "All refusals").text;
    expect(svg).to.include("41 refusals").and.include("&lt;b&gt;RATE&lt;/b&gt;").and.not.include("<b>");
  });
});
