/**
 * The system under test, as real processes on free loopback ports: a MongoDB-protocol
 * server from the project's harness (startMongoServer: mongodb-memory-server or
 * FerretDB, it says which), then `keycap serve kernel` and `keycap serve ledger` as two
 * child processes (so each one's CPU and memory can be read), and the benchmark baseline
 * (bench/baseline-server.ts) as a third, bench-only process on the ledger's database.
 * On request also: the peer (bench/peer-server.ts, Powertools idempotency on a Redis of
 * its own, bench/redis.ts) on the ledger's database, and extra kernel + ledger replicas
 * sharing the first kernel's data dir (signing keys, runtime secret) and the same two
 * databases. The in-process peer (scenario `peer-inproc`) is no process of the stack: the
 * bench opens it itself from `ledgerEnv` and `redis`, which the stack starts for it.
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
import { startRedis, type RedisHandle } from "./redis";
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

/** One extra kernel + ledger pair (StackOptions.replicas). */
export interface Replica {
  kernel: ServiceProc;
  ledger: ServiceProc;
  kernelAddress: string;
  ledgerAddress: string;
}

/** The peer (StackOptions.peer): Powertools idempotency on Redis around the baseline's insert. */
export interface PeerProc {
  proc: ServiceProc;
  address: string;
  redis: RedisHandle;
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
  /** Extra kernel + ledger pairs, in start order (kernel2/ledger2, kernel3/ledger3, ...). */
  replicas: Replica[];
  /** The peer, when asked for. */
  peer?: PeerProc;
  /** Redis, with the peer or when asked for (StackOptions.redis); the peer's, when both. */
  redis?: RedisHandle;
  /**
   * The environment the ledger, the baseline and the peer start with (before the wire tap
   * rewrites MONGODB_URI): the in-process peer loads its configuration from it.
   */
  ledgerEnv: Record<string, string>;
  /**
   * PIDs to sample: ledger, kernel, baseline and, when found, the MongoDB-protocol server;
   * with replicas kernel2, ledger2, ...; with the peer `peer` and `redis`; with Redis alone `redis`.
   */
  pids: Record<string, number>;
  /** With `metrics`: where the kernel and the ledger serve `GET /metrics` (host:port). */
  metrics?: { kernel: string; ledger: string };
  /** With `tap`: one wire tap per service, between it and the database. */
  taps?: Record<"kernel" | "ledger" | "baseline", WireTap> & { peer?: WireTap };
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
  /** Extra kernel + ledger pairs to start (default 0). */
  replicas?: number;
  /** Start Redis and the peer (bench/peer-server.ts). */
  peer?: boolean;
  /** Start Redis even without the peer (for the in-process peer). */
  redis?: boolean;
  /**
   * Serve Prometheus metrics from the kernel and the ledger (KEYCAP_METRICS_LISTEN on a free
   * loopback port each; `Stack.metrics` has the addresses): the chain pass reads them
   * (bench/chain.ts). Also on when the bench itself runs with KEYCAP_METRICS_LISTEN set.
   */
  metrics?: boolean;
  /** Progress messages (e.g. installing redis-server). */
  log?: (m: string) => void;
}

/** Starts MongoDB (harness), the kernel, then the ledger; stops whatever started on failure. */
export async function startStack(opts: StackOptions = {}): Promise<Stack> {
  const mongo = await startMongoServer({ logger: createLogger("bench", "warn") });
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-bench-"));
  const started: ServiceProc[] = [];
  const taps: WireTap[] = [];
  let redis: RedisHandle | undefined;
  const cleanup = async (): Promise<void> => {
    for (const s of started.reverse()) await s.stop().catch(() => undefined);
    await redis?.stop().catch(() => undefined);
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
      // Metrics on when asked for (the chain pass, the round-trip pass's hop count) or when the
      // bench is run with KEYCAP_METRICS_LISTEN set; each process picks a free port of its own.
      ...(opts.metrics || process.env["KEYCAP_METRICS_LISTEN"] ? { KEYCAP_METRICS_LISTEN: "127.0.0.1:0" } : {}),
    };
    // Kernel and ledger share one database, as ADR 0034 requires (the kernel's settler reads
    // the ledger's entries to complete the calls they complete; a kernel that cannot see them
    // would give every call a pending copy after 5 s). Until ADR 0034 they had separate ones.
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
      { ...base, MONGODB_URI: kernelDb.uri, KEYCAP_MONGODB_DATABASE: database },
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
    // Replicas: the same env (data dir with the signing keys and runtime secret the first
    // kernel wrote, the same kernel and ledger databases), their own free ports; each
    // extra ledger fetches the kernel's public keys from its own kernel.
    const replicas: Replica[] = [];
    for (let i = 0; i < (opts.replicas ?? 0); i++) {
      const n = i + 2;
      const k = await startService(
        "kernel",
        { ...base, MONGODB_URI: mongo.uri, KEYCAP_MONGODB_DATABASE: database },
        opts.readyTimeoutMs,
        opts.kernelNodeFlags,
        `kernel${n}`,
      );
      started.push(k);
      const kAddress = need(k.endpoints, "kernel");
      const l = await startService(
        "ledger",
        { ...base, KEYCAP_KERNEL_ADDRESS: kAddress, MONGODB_URI: mongo.uri },
        opts.readyTimeoutMs,
        opts.ledgerNodeFlags,
        `ledger${n}`,
      );
      started.push(l);
      replicas.push({ kernel: k, ledger: l, kernelAddress: kAddress, ledgerAddress: need(l.endpoints, "ledger") });
      pids[`kernel${n}`] = k.pid;
      pids[`ledger${n}`] = l.pid;
    }
    let peer: PeerProc | undefined;
    let peerTap: WireTap | undefined;
    if (opts.peer || opts.redis) {
      redis = await startRedis(opts.log ? { log: opts.log } : {});
      pids["redis"] = redis.pid;
    }
    if (opts.peer && redis) {
      const peerDb = await tapFor();
      peerTap = peerDb.tap;
      const proc = await startService("peer", { ...ledgerEnv, MONGODB_URI: peerDb.uri, KEYCAP_BENCH_REDIS_URL: redis.url }, opts.readyTimeoutMs);
      started.push(proc);
      peer = { proc, address: need(proc.endpoints, "peer"), redis };
      pids["peer"] = proc.pid;
    }
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
      replicas,
      ...(peer ? { peer } : {}),
      ...(redis ? { redis } : {}),
      ledgerEnv,
      pids,
      ...(kernel.endpoints["metrics"] && ledger.endpoints["metrics"]
        ? { metrics: { kernel: kernel.endpoints["metrics"], ledger: ledger.endpoints["metrics"] } }
        : {}),
      ...(kernelDb.tap && ledgerDb.tap && baselineDb.tap
        ? { taps: { kernel: kernelDb.tap, ledger: ledgerDb.tap, baseline: baselineDb.tap, ...(peerTap ? { peer: peerTap } : {}) } }
        : {}),
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

/** Starts `keycap serve <which>` (or a bench-only process: baseline, peer) and waits for its "ready" log line. */
async function startService(
  which: "kernel" | "ledger" | "baseline" | "peer",
  env: Record<string, string>,
  readyTimeoutMs = 60_000,
  nodeFlags: string[] = [],
  name: string = which,
): Promise<ServiceProc> {
  const args =
    which === "baseline" || which === "peer"
      ? [path.join(projectRoot(), `dist/bench/${which}-server.js`)]
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
      reject(new Error(`${name} not ready within ${readyTimeoutMs} ms:\n${tail.join("\n")}`));
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
      reject(new Error(`${name} exited (${child.exitCode ?? child.signalCode}) before ready:\n${tail.join("\n")}`));
    });
  });
  return {
    name,
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
