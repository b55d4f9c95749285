/**
 * The Go and Python clients' batching of concurrent begins and completes (issue 33, ADR 0022),
 * measured per language: each client's own bench program drives whole calls (begin, write,
 * complete) against the running stack at one concurrency with batching on and off,
 * alternating, and prints one JSON line; this collects them (the TypeScript client's pair is
 * the main table's `call` and `call-unary`). A program that cannot run is reported as such.
 */
import { execFile } from "node:child_process";
import * as path from "node:path";
import { promisify } from "node:util";
import { projectRoot } from "../services/common/src/repo-paths";

/** One language at one concurrency. */
export interface ClientCallsResult {
  language: string;
  concurrency: number;
  batched_per_s?: number;
  unbatched_per_s?: number;
  ratio?: number;
  errors?: number;
  /** Set when the program could not run. */
  error?: string;
}

interface Program {
  language: string;
  command: (root: string) => string[];
  cwd?: string;
}

const PROGRAMS: Program[] = [
  // venv.sh brings the client's venv to requirements.txt first (installs on a fresh machine).
  {
    language: "python",
    command: (root) => ["bash", "-c", 'source "$0/clients/python/venv.sh" && exec "$PY" "$0/clients/python/bench/call_bench.py" "$@"', root],
  },
  { language: "go", command: () => ["go", "run", "./cmd/call-bench"], cwd: "clients/go" },
];

export interface StackAddresses {
  kernelAddress: string;
  ledgerAddress: string;
  runtimeToken: string;
}

/** Runs every language's program at each concurrency for `seconds` (both sides together). */
export async function measureClientCalls(
  stack: StackAddresses,
  concurrency: readonly number[],
  seconds: number,
  log: (m: string) => void,
): Promise<ClientCallsResult[]> {
  const root = projectRoot();
  const out: ClientCallsResult[] = [];
  for (const p of PROGRAMS) {
    for (const c of concurrency) {
      const [cmd, ...args] = p.command(root);
      log(`client calls: ${p.language} c=${c}`);
      try {
        const { stdout } = await promisify(execFile)(
          cmd!,
          [...args, stack.kernelAddress, stack.ledgerAddress, stack.runtimeToken, String(c), String(seconds)],
          {
            cwd: path.join(root, p.cwd ?? "."),
            maxBuffer: 1024 * 1024,
            timeout: (seconds * 3 + 180) * 1000,
          },
        );
        out.push(JSON.parse(stdout.trim().split("\n").at(-1) ?? "") as ClientCallsResult);
      } catch (err) {
        out.push({ language: p.language, concurrency: c, error: (err instanceof Error ? err.message : String(err)).split("\n")[0]!.slice(0, 200) });
      }
    }
  }
  return out;
}

const f = (v: number | undefined, digits = 0): string => (v === undefined || !Number.isFinite(v) ? "–" : v.toFixed(digits));

export function clientCallsMarkdown(results: readonly ClientCallsResult[]): string {
  const lines = [
    "| client (whole call) | c | batched calls/s | one RPC per call, calls/s | ×unbatched | errors |",
    "| --- | ---: | ---: | ---: | ---: | ---: |",
  ];
  for (const r of results) {
    if (r.error) lines.push(`| ${r.language} | ${r.concurrency} | – | – | – | not run: ${r.error.replace(/\|/g, "/")} |`);
    else lines.push(`| ${r.language} | ${r.concurrency} | ${f(r.batched_per_s)} | ${f(r.unbatched_per_s)} | ${f(r.ratio, 2)} | ${f(r.errors)} |`);
  }
  return lines.join("\n");
}
