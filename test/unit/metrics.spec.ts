import { expect } from "chai";
import * as fs from "node:fs";
import * as path from "node:path";
import { Metrics } from "../../services/common/src/metrics";
import { OTHER_LABEL, TopLabels } from "../../services/common/src/top-labels";
import { tracingRequested } from "../../services/common/src/tracing";

const ROOT = path.resolve(__dirname, "..", "..", "..");

describe("bounded tool labels (issue 13)", function () {
  it("gives the first tools their own label, and everything past the limit is other", function () {
    const t = new TopLabels(2);
    expect([t.label("a"), t.label("b"), t.label("c"), t.label("a")]).to.deep.equal(["a", "b", OTHER_LABEL, "a"]);
  });

  it("never lets a flood of ids seen once displace a tool that is refused often", function () {
    const evicted: string[] = [];
    const t = new TopLabels(3, (v) => evicted.push(v));
    for (let i = 0; i < 10; i++) t.label("real");
    for (let i = 0; i < 10_000; i++) t.label(`junk-${i}`);
    expect(t.labelled()).to.include("real");
    expect(t.labelled()).to.have.length(3);
    expect(evicted).to.deep.equal([]);
  });

  it("promotes a tool that becomes frequent over the least frequent labelled one, and says which lost its label", function () {
    const evicted: string[] = [];
    const t = new TopLabels(2, (v) => evicted.push(v));
    t.label("a");
    t.label("a");
    t.label("b");
    const seen: string[] = [];
    for (let i = 0; i < 3; i++) seen.push(t.label("c"));
    // b was seen once: c takes its label once c has been seen more often (twice).
    expect(seen).to.deep.equal([OTHER_LABEL, "c", "c"]);
    expect(evicted).to.deep.equal(["b"]);
    expect(t.labelled().sort()).to.deep.equal(["a", "c"]);
  });
});

describe("the Grafana dashboard (issue 13)", function () {
  it("queries only metrics the services export", async function () {
    const metrics = new Metrics({ toolLabels: 5 });
    metrics.callGauges(async () => ({ pending: 0, indeterminate: 0 }));
    // Histograms are exported as _bucket, _sum and _count.
    const exported = new Set<string>();
    for (const m of await metrics.registry.getMetricsAsJSON()) {
      exported.add(m.name);
      if (String(m.type) === "histogram") for (const suffix of ["_bucket", "_sum", "_count"]) exported.add(m.name + suffix);
    }
    const dashboard = JSON.parse(fs.readFileSync(path.join(ROOT, "docs", "grafana-dashboard.json"), "utf8")) as { panels: { targets: { expr: string }[] }[] };
    const exprs = dashboard.panels.flatMap((p) => p.targets.map((t) => t.expr));
    expect(exprs.length).to.be.greaterThan(10);
    const named = new Set(exprs.flatMap((e) => e.match(/\b(?:keycap|process|nodejs)_[a-z0-9_]+\b/g) ?? []));
    expect(
      [...named].filter((n) => !exported.has(n)),
      "metrics the dashboard names that nothing exports",
    ).to.deep.equal([]);
    // Every keycap metric appears on the dashboard.
    const keycap = [...exported].filter((n) => n.startsWith("keycap_") && !/_(sum|count|bucket)$/.test(n) && !exported.has(`${n}_bucket`));
    const histograms = [...exported].filter((n) => n.startsWith("keycap_") && exported.has(`${n}_bucket`));
    const onBoard = [...named].join(" ");
    expect(
      [...keycap, ...histograms].filter((n) => !onBoard.includes(n)),
      "keycap metrics missing from the dashboard",
    ).to.deep.equal([]);
  });
});

describe("traces are off by default (issue 13)", function () {
  it("starts the SDK only when OTEL_TRACES_EXPORTER names an exporter and the SDK is not disabled", function () {
    expect(tracingRequested({})).to.equal(false);
    expect(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:4318" })).to.equal(false);
    expect(tracingRequested({ OTEL_TRACES_EXPORTER: "none" })).to.equal(false);
    expect(tracingRequested({ OTEL_TRACES_EXPORTER: "otlp" })).to.equal(true);
    expect(tracingRequested({ OTEL_TRACES_EXPORTER: "otlp", OTEL_SDK_DISABLED: "true" })).to.equal(false);
  });
});
