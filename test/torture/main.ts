/**
 * `make torture`: the long kill-anything run on each embedded backend, with a
 * report under test/results/.
 *
 *   node dist/test/torture/main.js [--kills 1000] [--backend both|ferretdb-sqlite|ferretdb-pg] [--seed N] [--retention on|off]
 *
 * Retention is on by default, at seconds-long settings (torture.ts SHORT_RETENTION).
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { parseArgs } from "node:util";
import { projectRoot } from "../../services/common/src/repo-paths";
import { runTorture, type TortureReport } from "./torture";
import { violations } from "./verdict";

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      kills: { type: "string", default: "1000" },
      backend: { type: "string", default: "both" },
      seed: { type: "string", default: String(Date.now() % 1_000_000) },
      concurrency: { type: "string", default: "4" },
      retention: { type: "string", default: "on" },
    },
  });
  const kills = Number(values.kills);
  const seed = Number(values.seed);
  if (!Number.isInteger(kills) || kills < 1) throw new Error(`--kills: expected a positive integer, got ${values.kills}`);
  if (!Number.isInteger(seed)) throw new Error(`--seed: expected an integer, got ${values.seed}`);
  if (values.retention !== "on" && values.retention !== "off") throw new Error(`--retention: expected on or off, got ${values.retention}`);
  const backends = values.backend === "both" ? (["ferretdb-sqlite", "ferretdb-pg"] as const) : ([values.backend] as const);
  const outDir = path.join(projectRoot(), "test", "results");
  fs.mkdirSync(outDir, { recursive: true });
  const reports: TortureReport[] = [];
  let failed = false;
  for (const backend of backends) {
    if (backend !== "ferretdb-sqlite" && backend !== "ferretdb-pg") throw new Error(`--backend: expected both, ferretdb-sqlite or ferretdb-pg, got ${backend}`);
    process.stderr.write(`torture on ${backend}: ${kills} kills, seed ${seed}\n`);
    const report = await runTorture({
      backend,
      kills,
      seed,
      concurrency: Number(values.concurrency),
      retention: values.retention === "on",
      progress: (l) => process.stderr.write(`  ${l}\n`),
    });
    reports.push(report);
    const bad = violations(report);
    failed ||= bad.length > 0;
    process.stderr.write(`${JSON.stringify(report, null, 2)}\n${bad.length === 0 ? "PASS" : `FAIL: ${bad.join("; ")}`}\n`);
  }
  const stamp = new Date().toISOString().replace(/[:.]/g, "-");
  const file = path.join(outDir, `torture-${stamp}.json`);
  fs.writeFileSync(
    file,
    JSON.stringify({ at: new Date().toISOString(), reports, verdicts: reports.map((r) => ({ backend: r.backend, violations: violations(r) })) }, null, 2) +
      "\n",
  );
  process.stderr.write(`report: ${path.relative(process.cwd(), file)}\n`);
  process.exit(failed ? 1 : 0);
}

main().catch((err: unknown) => {
  process.stderr.write(`torture: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(2);
});
