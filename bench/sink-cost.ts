/**
 * Sink-side verification cost per request in each language (issue 12), next to the
 * ledger's: each SDK's own bench program runs the same handler protected and unprotected
 * in one run and prints one JSON line; this collects them. A program that cannot run (its
 * toolchain missing) is reported as such, not skipped silently.
 */
import { execFile } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import { projectRoot } from "../services/common/src/repo-paths";

/** One language's line. */
export interface SinkCostResult {
  language: string;
  requests?: number;
  protected_per_s?: number;
  unprotected_per_s?: number;
  ratio?: number;
  verify_us_per_request?: number;
  how?: string;
  http_ratio?: number;
  http_how?: string;
  /** Set when the program could not run. */
  error?: string;
}

interface SinkBenchProgram {
  language: string;
  /** Command and arguments, relative to the repo root; `seconds` is appended. */
  command: (root: string) => string[];
  cwd?: string;
  /** A file that must exist for the program to be runnable (e.g. the Python venv). */
  needs?: string;
}

const PROGRAMS: SinkBenchProgram[] = [
  { language: "typescript", command: (root) => [process.execPath, path.join(root, "dist/bench/sink-ts.js")] },
  {
    language: "python",
    // venv.sh brings the client's venv to requirements.txt first (installs on a fresh machine).
    command: (root) => ["bash", "-c", 'source "$0/clients/python/venv.sh" && exec "$PY" "$0/clients/python/bench/sink_bench.py" "$@"', root],
  },
  { language: "go", command: () => ["go", "run", "./cmd/sink-bench"], cwd: "clients/go" },
];

/** Runs every language's sink bench for about `seconds` each. */
export async function measureSinkCosts(seconds: number, log: (m: string) => void): Promise<SinkCostResult[]> {
  const root = projectRoot();
  const out: SinkCostResult[] = [];
  for (const p of PROGRAMS) {
    if (p.needs && !fs.existsSync(path.join(root, p.needs))) {
      out.push({ language: p.language, error: `${p.needs} missing (make test-${p.language} sets it up)` });
      continue;
    }
    const [cmd, ...args] = p.command(root);
    log(`sink cost: ${p.language}`);
    try {
      const { stdout } = await promisify(execFile)(cmd!, [...args, String(seconds)], {
        cwd: path.join(root, p.cwd ?? "."),
        maxBuffer: 1024 * 1024,
        timeout: (seconds * 4 + 120) * 1000,
      });
      const line = stdout.trim().split("\n").at(-1) ?? "";
      out.push(JSON.parse(line) as SinkCostResult);
    } catch (err) {
      out.push({ language: p.language, error: (err instanceof Error ? err.message : String(err)).split("\n")[0]!.slice(0, 200) });
    }
  }
  return out;
}

const f = (v: number | undefined, digits = 0): string => (v === undefined || !Number.isFinite(v) ? "–" : v.toFixed(digits));

/** The Markdown table; `ledgerVerifyPerS` is the micro benchmark of the ledger's verifier. */
export function sinkCostMarkdown(results: readonly SinkCostResult[], ledgerVerifyPerS: number | undefined): string {
  const lines = [
    "| sink SDK | protected req/s | unprotected req/s | ×unprotected | verification µs/req | over HTTP ×unprotected | how |",
    "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
  ];
  if (ledgerVerifyPerS !== undefined) {
    lines.push(`| ledger (reference) | ${f(ledgerVerifyPerS)} | – | – | ${f(1e6 / ledgerVerifyPerS, 1)} | – | micro benchmark "capability verify", one core |`);
  }
  for (const r of results) {
    if (r.error) lines.push(`| ${r.language} | – | – | – | – | – | not run: ${r.error.replace(/\|/g, "/")} |`);
    else {
      lines.push(
        `| ${r.language} | ${f(r.protected_per_s)} | ${f(r.unprotected_per_s)} | ${f(r.ratio, 4)} | ${f(r.verify_us_per_request, 1)} | ${f(r.http_ratio, 2)} | ${(r.how ?? "").replace(/\|/g, "/")}${r.http_how ? `; HTTP: ${r.http_how.replace(/\|/g, "/")}` : ""} |`,
      );
    }
  }
  return lines.join("\n");
}
