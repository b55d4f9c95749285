/**
 * ghz (github.com/bojand/ghz), the stock gRPC load generator that drives the ledger
 * scenarios, installed once from the Go module proxy at a pinned version into the keycap
 * cache (`GOBIN=<cache>/gotools go install github.com/bojand/ghz/cmd/ghz@<version>`).
 *
 * Fresh capabilities, one per request: ghz reads request bodies from a JSON array
 * (`--data-file`, request i uses element i mod n) but has no metadata array. Its metadata
 * is a Go template evaluated per request, with sprig's `env` function; so capability i
 * is passed as environment variable K<i> and the metadata template is
 * `{"authorization":"Bearer {{env (printf \`K%d\` (mod .RequestNumber n))}}"}`, which
 * pairs request body i with capability i. The environment of one process is bounded
 * (execve allows at most 6 MiB with an unlimited stack limit), so a run is a sequence of
 * ghz invocations ("chunks") of at most CHUNK requests each (`-n <items>`), sized by the
 * caller to the time left; the per-request latencies of all chunks (`-O json` details)
 * are merged.
 *
 * No deadline flag: ghz v0.120 drops `-n` when `-x`/`--max-duration` is given (its config
 * sets the run to "until the deadline") and cycles the data array, so request n + i sent
 * item i again — a duplicate key and a replayed capability, not a fresh write
 * (test/it_bench_ghz.spec.ts).
 */
import { execFile, execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import { keycapCacheDir } from "../services/common/src/embedded-mongo";
import type { PoolItem } from "./capabilities";

export const GHZ_MODULE = "github.com/bojand/ghz/cmd/ghz";
/** Pinned: the newest release on the Go module proxy (`go list -m -versions` omits it; `@latest` resolves to v0.93.0). */
export const GHZ_VERSION = "v0.120.0";
/** Requests per ghz invocation; 8000 capabilities of ~520 bytes stay well under 6 MiB. */
export const CHUNK = 8000;

/** Path of the ghz binary, installing it first when it is missing or not the pinned version. */
export async function ensureGhz(log: (m: string) => void): Promise<{ bin: string; version: string }> {
  const gobin = path.join(keycapCacheDir(), "gotools");
  const bin = path.join(gobin, "ghz");
  const current = versionOf(bin);
  if (current === GHZ_VERSION.replace(/^v/, "")) return { bin, version: GHZ_VERSION };
  log(`installing ghz ${GHZ_VERSION} from the Go module proxy into ${gobin} (first run only)`);
  fs.mkdirSync(gobin, { recursive: true });
  try {
    await promisify(execFile)("go", ["install", `${GHZ_MODULE}@${GHZ_VERSION}`], {
      env: { ...process.env, GOBIN: gobin, GOFLAGS: "-mod=mod" },
      maxBuffer: 16 * 1024 * 1024,
    });
  } catch (err) {
    throw new Error(`cannot install ghz ${GHZ_VERSION} (is Go installed and the module proxy reachable?): ${String(err).split("\n")[0]}`);
  }
  const installed = versionOf(bin);
  if (installed !== GHZ_VERSION.replace(/^v/, "")) throw new Error(`ghz at ${bin} reports version ${installed ?? "?"}, expected ${GHZ_VERSION}`);
  return { bin, version: GHZ_VERSION };
}

/** The module version built into the binary (`go version -m`; `ghz --version` says "dev" for go-installed builds). */
function versionOf(bin: string): string | undefined {
  if (!fs.existsSync(bin)) return undefined;
  try {
    const info = execFileSync("go", ["version", "-m", bin], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    return /^\s*mod\s+github\.com\/bojand\/ghz\s+v(\S+)/m.exec(info)?.[1];
  } catch {
    return undefined;
  }
}

/** One ghz invocation. */
export interface GhzChunkSpec {
  bin: string;
  /** FileDescriptorSet with the service (gen/keycap.binpb). */
  protoset: string;
  /** Fully-qualified method, e.g. keycap.ledger.v1.LedgerService.Write. */
  call: string;
  /** host:port */
  address: string;
  concurrency: number;
  /** Request i carries items[i].key and presents items[i].token, each sent once; at most CHUNK items. */
  items: PoolItem[];
  /** The payload (same for every request). */
  payload: Buffer;
  /** Scratch directory for the data, environment and output files. */
  workDir: string;
}

/** What one invocation measured. */
export interface GhzChunkResult {
  /** ghz's own run time (first request sent to last answer), seconds. */
  seconds: number;
  /** One latency per answered request, milliseconds. */
  latenciesMs: number[];
  /** gRPC status name (ghz spelling: OK, PermissionDenied, ...) → count. */
  statuses: Record<string, number>;
  /** A few distinct error messages, for the log. */
  errorSamples: string[];
}

interface GhzReport {
  total: number;
  details?: { latency: number; status: string; error: string }[];
}

/** Runs one ghz invocation and reads its JSON report. */
export async function runGhzChunk(spec: GhzChunkSpec): Promise<GhzChunkResult> {
  const n = spec.items.length;
  if (n === 0 || n > CHUNK) throw new RangeError(`a ghz chunk has 1..${CHUNK} requests, not ${n}`);
  fs.mkdirSync(spec.workDir, { recursive: true });
  const dataFile = path.join(spec.workDir, "data.json");
  const envFile = path.join(spec.workDir, "capabilities.env");
  const outFile = path.join(spec.workDir, "report.json");
  const payload = spec.payload.toString("base64");
  fs.writeFileSync(dataFile, JSON.stringify(spec.items.map((it) => ({ key: it.key, payload }))));
  // Tokens are base64url and dots: safe unquoted in a shell assignment.
  fs.writeFileSync(envFile, spec.items.map((it, i) => `K${i}=${it.token}\n`).join(""));
  // ghz parses the metadata as JSON before templating it: raw-string (backtick) literal.
  const metadata = `{"authorization":"Bearer {{env (printf \`K%d\` (mod .RequestNumber ${n}))}}"}`;
  const args = [
    "--protoset",
    spec.protoset,
    "--call",
    spec.call,
    "--insecure",
    "--concurrency",
    String(spec.concurrency),
    "--total",
    String(n),
    "--timeout",
    "20s",
    "--data-file",
    dataFile,
    "--metadata",
    metadata,
    "--format",
    "json",
    "--output",
    outFile,
    spec.address,
  ];
  // The capabilities enter ghz's environment through a shell that lifts the stack limit
  // first (execve's environment limit is a quarter of it, at most 6 MiB).
  const script = 'ulimit -s unlimited 2>/dev/null || ulimit -s "$(ulimit -Hs)"; set -a; . "$1"; set +a; shift; exec "$@"';
  await promisify(execFile)("bash", ["-c", script, "ghz-with-capabilities", envFile, spec.bin, ...args], {
    env: { PATH: process.env["PATH"] ?? "", HOME: process.env["HOME"] ?? "" },
    maxBuffer: 64 * 1024 * 1024,
  });
  const report = JSON.parse(fs.readFileSync(outFile, "utf8")) as GhzReport;
  const answered = report.details?.length ?? 0;
  if (answered > n) throw new Error(`ghz sent ${answered} requests for ${n} items: some keys and capabilities went twice`);
  const latenciesMs: number[] = [];
  const statuses: Record<string, number> = {};
  const errorSamples = new Set<string>();
  for (const d of report.details ?? []) {
    latenciesMs.push(d.latency / 1e6);
    const st = statusName(d.status);
    statuses[st] = (statuses[st] ?? 0) + 1;
    if (d.error && errorSamples.size < 3) errorSamples.add(`${d.status}: ${d.error.slice(0, 200)}`);
  }
  for (const f of [dataFile, envFile, outFile]) fs.rmSync(f, { force: true });
  return { seconds: report.total / 1e9, latenciesMs, statuses, errorSamples: [...errorSamples] };
}

/** ghz's status spelling (Go's codes.Code: OK, PermissionDenied) → gRPC's (OK, PERMISSION_DENIED). */
export function statusName(ghzStatus: string): string {
  return ghzStatus === "OK" ? "OK" : ghzStatus.replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}
