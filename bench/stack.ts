/**
 * The system under test, as real processes on free loopback ports: a MongoDB-protocol
 * server from the project's harness (startMongoServer: mongodb-memory-server or
 * FerretDB, it says which), then `keycap serve kernel` and `keycap serve ledger` as two
 * child processes (so each one's CPU and memory can be read), and the benchmark baseline
 * (bench/baseline-server.ts) as a third, bench-only process on the ledger's database.
 */
import { spawn, type ChildProcess } from "node:child_process";
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as readline from "node:readline";
import { startMongoServer, type MongoServerHandle } from "../services/common/src/embedded-mongo";
import { createLogger } from "../services/common/src/logger";
import { projectRoot } from "../services/common/src/repo-paths";
import { findChildPids } from "./proc-sampler";
import { targetOf, viaTap, WireTap } from "./wire-tap";

/** One keycap service process. */
export interface ServiceProc {
  name: string;
  child: ChildProcess;
  pid: number;
  /** Listener name → host:port, from the service's "ready" log line. */
  endpoints: Record<string, string>;
  /** The last lines it printed, for error messages. */
  tail(): string;
  /** How many lines it has printed (stdout and stderr): its log volume. */
  lines(): number;
  stop(): Promise<void>;
}

/** The running stack. */
export interface Stack {
  mongo: MongoServerHandle;
  kernel: ServiceProc;
  ledger: ServiceProc;
  /** The bench-only baseline process (no capability checks), on the ledger's database. */
  baseline: ServiceProc;
  dataDir: string;
  kernelAddress: string;
  ledgerAddress: string;
  baselineAddress: string;
  /** The runtime principal's secret the bench presents to the kernel. */
  runtimeToken: string;
  /** The kernel's signing key file (the bench mints capabilities with it, as the kernel does). */
  signingKeyFile: string;
  /** PIDs to sample: ledger, kernel, baseline and, when found, the MongoDB-protocol server. */
  pids: Record<string, number>;
  /** With `tap`: one wire tap per service, between it and the database. */
  taps?: Record<"kernel" | "ledger" | "baseline", WireTap>;
  stop(): Promise<void>;
}

export interface StackOptions {
  /** Extra node flags for the ledger process (e.g. --cpu-prof; not allowed in NODE_OPTIONS). */
  ledgerNodeFlags?: string[];
  /** Extra node flags for the kernel process. */
  kernelNodeFlags?: string[];
  /** Milliseconds to wait for each service's "ready" line. Default 60000. */
  readyTimeoutMs?: number;
  /** Put a wire tap (bench/wire-tap.ts) between each service and the database. */
  tap?: boolean;
}

/** Starts MongoDB (harness), the kernel, then the ledger; stops whatever started on failure. */
export async function startStack(opts: StackOptions = {}): Promise<Stack> {
  const mongo = await startMongoServer({ logger: createLogger("bench", "warn") });
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-bench-"));
  const started: ServiceProc[] = [];
  const taps: WireTap[] = [];
  const cleanup = async (): Promise<void> => {
    for (const s of started.reverse()) await s.stop().catch(() => undefined);
    for (const t of taps) await t.stop().catch(() => undefined);
    await mongo.stop().catch(() => undefined);
    fs.rmSync(dataDir, { recursive: true, force: true });
  };
  try {
    const base: Record<string, string> = {
      PATH: process.env["PATH"] ?? "",
      HOME: process.env["HOME"] ?? "",
      MONGODB_URI: mongo.uri,
      KEYCAP_MONGODB_DATABASE: `bench_${crypto.randomBytes(4).toString("hex")}`,
      KEYCAP_DATA_DIR: dataDir,
      KEYCAP_KERNEL_LISTEN: "127.0.0.1:0",
      KEYCAP_LEDGER_LISTEN: "127.0.0.1:0",
      KEYCAP_ADMIN_LISTEN: "127.0.0.1:0",
      KEYCAP_ADMIN_TOKEN: crypto.randomBytes(24).toString("base64url"),
      KEYCAP_RUNTIME_TOKEN: `keycap_rt_${crypto.randomBytes(24).toString("base64url")}`,
      // "info" is needed for the "ready" line; nothing is logged per request at info.
      KEYCAP_LOG_LEVEL: "info",
      KEYCAP_SHUTDOWN_GRACE_MS: "3000",
    };
    // Kernel and ledger keep separate databases, as separate deployments would: on
    // FerretDB a database is one SQLite file, and the kernel's journal churn (the `call`
    // scenario) would otherwise stall whichever ledger scenario ran next.
    const database = base["KEYCAP_MONGODB_DATABASE"]!;
    const tapFor = async (): Promise<{ tap?: WireTap; uri: string }> => {
      if (!opts.tap) return { uri: mongo.uri };
      const tap = await WireTap.start(targetOf(mongo.uri));
      taps.push(tap);
      return { tap, uri: viaTap(mongo.uri, tap) };
    };
    const [kernelDb, ledgerDb, baselineDb] = [await tapFor(), await tapFor(), await tapFor()];
    const kernel = await startService(
      "kernel",
      { ...base, MONGODB_URI: kernelDb.uri, KEYCAP_MONGODB_DATABASE: `${database}_kernel` },
      opts.readyTimeoutMs,
      opts.kernelNodeFlags,
    );
    started.push(kernel);
    const kernelAddress = need(kernel.endpoints, "kernel");
    const ledgerEnv: Record<string, string> = { ...base, KEYCAP_KERNEL_ADDRESS: kernelAddress };
    const ledger = await startService("ledger", { ...ledgerEnv, MONGODB_URI: ledgerDb.uri }, opts.readyTimeoutMs, opts.ledgerNodeFlags);
    started.push(ledger);
    const ledgerAddress = need(ledger.endpoints, "ledger");
    const baseline = await startService("baseline", { ...ledgerEnv, MONGODB_URI: baselineDb.uri }, opts.readyTimeoutMs, opts.ledgerNodeFlags);
    started.push(baseline);
    const baselineAddress = need(baseline.endpoints, "baseline");
    const pids: Record<string, number> = { ledger: ledger.pid, kernel: kernel.pid, baseline: baseline.pid };
    const db = mongo.pid ?? findChildPids(process.pid, "mongod")[0];
    if (db !== undefined) pids["db"] = db;
    return {
      mongo,
      kernel,
      ledger,
      baseline,
      dataDir,
      kernelAddress,
      ledgerAddress,
      baselineAddress,
      runtimeToken: base["KEYCAP_RUNTIME_TOKEN"]!,
      signingKeyFile: path.join(dataDir, "signing-keys.json"),
      pids,
      ...(kernelDb.tap && ledgerDb.tap && baselineDb.tap ? { taps: { kernel: kernelDb.tap, ledger: ledgerDb.tap, baseline: baselineDb.tap } } : {}),
      stop: cleanup,
    };
  } catch (err) {
    await cleanup();
    throw err;
  }
}

function need(endpoints: Record<string, string>, name: string): string {
  const v = endpoints[name];
  if (!v) throw new Error(`no ${name} endpoint in the ready line (${JSON.stringify(endpoints)})`);
  return v;
}

/** Starts `keycap serve <which>` (or the bench-only baseline process) and waits for its "ready" log line. */
async function startService(
  which: "kernel" | "ledger" | "baseline",
  env: Record<string, string>,
  readyTimeoutMs = 60_000,
  nodeFlags: string[] = [],
): Promise<ServiceProc> {
  const args =
    which === "baseline"
      ? [path.join(projectRoot(), "dist/bench/baseline-server.js")]
      : [path.join(projectRoot(), "dist/services/cli/src/main.js"), "serve", which];
  const child = spawn(process.execPath, [...nodeFlags, ...args], { env, stdio: ["ignore", "pipe", "pipe"] });
  let tail: string[] = [];
  let lines = 0;
  const keep = (line: string): void => {
    lines++;
    tail.push(line);
    if (tail.length > 40) tail = tail.slice(-40);
  };
  readline.createInterface({ input: child.stderr! }).on("line", keep);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const endpoints = await new Promise<Record<string, string>>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${which} not ready within ${readyTimeoutMs} ms:\n${tail.join("\n")}`));
    }, readyTimeoutMs);
    readline.createInterface({ input: child.stdout! }).on("line", (line) => {
      keep(line);
      try {
        const rec = JSON.parse(line) as { msg?: string; endpoints?: { listener: string; address: string }[] };
        if (rec.msg === "ready" && rec.endpoints) {
          clearTimeout(timer);
          resolve(Object.fromEntries(rec.endpoints.map((e) => [e.listener, e.address])));
        }
      } catch {
        // not a log line
      }
    });
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`${which} exited (${child.exitCode ?? child.signalCode}) before ready:\n${tail.join("\n")}`));
    });
  });
  return {
    name: which,
    child,
    pid: child.pid as number,
    endpoints,
    tail: () => tail.join("\n"),
    lines: () => lines,
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGTERM");
      const timeout = new Promise<"timeout">((r) => setTimeout(() => r("timeout"), 15_000).unref());
      if ((await Promise.race([exited, timeout])) === "timeout") {
        child.kill("SIGKILL");
        await exited;
      }
    },
  };
}
