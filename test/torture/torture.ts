/**
 * The kill-anything torture test (issue 15): real processes — the
 * MongoDB-protocol server, one kernel, two ledger replicas and a worker running
 * the TypeScript runtime — SIGKILLed at random (one or two at a time, and by
 * the services themselves at fault-injection points armed through
 * KEYCAP_TEST_FAULT_POINTS), restarted, recovered; then a final recovery and
 * the independent checker (checker.ts).
 */
import { spawn, type ChildProcess } from "node:child_process";
import * as crypto from "node:crypto";
import { once } from "node:events";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { startMongoServer, type EmbeddedChoice, type MongoServerHandle } from "../../services/common/src/embedded-mongo";
import { createLogger } from "../../services/common/src/logger";
import { freePort } from "../support/ports";
import { startService, type ServiceProcess } from "../support/processes";
import { check, type CheckResult } from "./checker";
import { mulberry32 } from "./prng";

export type Target = "db" | "kernel" | "ledger-a" | "ledger-b" | "worker";
const TARGETS: readonly Target[] = ["db", "kernel", "ledger-a", "ledger-b", "worker"];

export interface TortureOptions {
  backend: Exclude<EmbeddedChoice, "auto">;
  /** Kills the driver sends (fault-point deaths come on top). */
  kills: number;
  seed: number;
  /** Concurrent call loops in the worker. */
  concurrency?: number;
  /** Milliseconds of load between kills: [min, max). */
  loadMs?: [number, number];
  /** Share of service starts that arm a fault point (default 0.25). */
  faultPointRate?: number;
  /** The fault point fires at its n-th pass, n in [min, max) (default [1, 40)). */
  faultPointAt?: [number, number];
  /** Progress lines (one per 10 kills) go here. */
  progress?: (line: string) => void;
  /**
   * Runs the services with retention on, at seconds-long settings (SHORT_RETENTION), so the
   * sweepers remove completed calls and refusals while processes die around them (default true).
   */
  retention?: boolean;
  /**
   * Gives up after this long, naming the phase it was in and what the processes said
   * last (a pass that hangs otherwise ends as a bare test-runner timeout).
   */
  deadlineMs?: number;
}

export interface TortureReport extends CheckResult {
  backend: string;
  seed: number;
  seconds: number;
  kills: Record<Target, number>;
  faultPointKills: Record<string, number>;
  totalKills: number;
  finalRecoveryClean: boolean;
  /** Handler errors the services logged as unexpected (each was answered INTERNAL). */
  serviceErrors: number;
  /** Every process the pass started (services and workers); all are dead when it returns. */
  pids: number[];
}

/**
 * Retention under torture (issue 32 item 3): completed calls go 20 seconds after their
 * completion and refusal records after two, swept every quarter second by whichever replica
 * holds the lease; the checker still finds no duplicate effect and no lost acknowledged write.
 * 20 s, not less: the replay lane replays a run it recorded moments before, and a run can be
 * replayed only while its calls are kept (docs/retention.md); a replay that a kill delayed
 * past that window is not begun (the worker's TORTURE_RETENTION_CALLS_SECONDS). Entries stay (the default): they
 * are what the checker counts effects by.
 */
export const SHORT_RETENTION: Readonly<Record<string, string>> = {
  KEYCAP_RETENTION_CALLS_SECONDS: "20",
  KEYCAP_RETENTION_REFUSALS_SECONDS: "2",
  KEYCAP_RETENTION_SWEEP_INTERVAL_MS: "250",
  KEYCAP_RETENTION_BATCH: "50",
};

const RUNTIME_TOKEN = `keycap_rt_torture_${crypto.randomBytes(18).toString("base64url")}`;

interface Managed {
  proc?: ServiceProcess | ChildProcess;
  killedByUs: boolean;
  /** The fault point armed at its last start, if any. */
  armed?: string;
}

export async function runTorture(opts: TortureOptions): Promise<TortureReport> {
  const started = Date.now();
  const random = mulberry32(opts.seed);
  const between = (lo: number, hi: number): number => lo + Math.floor(random() * (hi - lo));
  const emit = opts.progress ?? (() => undefined);
  let lastProgress = "";
  const progress = (line: string): void => {
    lastProgress = line;
    emit(line);
  };
  /** What the pass is doing now: the watchdog's message names it. */
  let phase = "starting the database";
  let aborted = false;
  const work = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-torture-"));
  // PostgreSQL (ferretdb-pg) runs as its own user and must reach its folder inside.
  fs.chmodSync(work, 0o755);
  const dbDir = path.join(work, "mongo");
  const [dbPort, kernelPort, ledgerAPort, ledgerBPort] = await Promise.all([freePort(), freePort(), freePort(), freePort()]);
  const mongoUri = `mongodb://127.0.0.1:${dbPort}/`;
  const database = `torture_${crypto.randomBytes(4).toString("hex")}`;
  const kernelAddress = `127.0.0.1:${kernelPort}`;
  const ledgerAddresses = [`127.0.0.1:${ledgerAPort}`, `127.0.0.1:${ledgerBPort}`];
  const journals: string[] = [];
  const kills = Object.fromEntries(TARGETS.map((t) => [t, 0])) as Record<Target, number>;
  const faultPointKills: Record<string, number> = {};
  let incarnation = 0;
  const serviceErrorExamples: string[] = [];
  let serviceErrors = 0;
  /** Keeps what a service process logged (a file per incarnation) and notes its unexpected errors. */
  function harvest(target: Target, m: Managed): void {
    if (m.proc === undefined || !("output" in m.proc)) return;
    const out = m.proc.output();
    fs.appendFileSync(path.join(work, `${target}.log`), out);
    for (const line of out.split("\n")) {
      if (!line.includes("unexpected error in handler")) continue;
      serviceErrors++;
      if (serviceErrorExamples.length < 5) serviceErrorExamples.push(`${target}: ${line.slice(0, 600)}`);
    }
    m.proc = undefined;
  }

  const baseEnv: Record<string, string> = {
    MONGODB_URI: mongoUri,
    KEYCAP_MONGODB_DATABASE: database,
    KEYCAP_DATA_DIR: path.join(work, "keycap"),
    KEYCAP_ADMIN_LISTEN: "127.0.0.1:0",
    KEYCAP_LOG_LEVEL: "info", // the "ready" line names the bound ports
    KEYCAP_RUNTIME_TOKEN: RUNTIME_TOKEN,
    KEYCAP_KERNEL_ADDRESS: kernelAddress,
    // The kernel asks this replica whether a Queryable request took effect (recovery).
    KEYCAP_LEDGER_ADDRESS: ledgerAddresses[0]!,
    ...(opts.retention === false ? {} : SHORT_RETENTION),
  };
  fs.mkdirSync(baseEnv["KEYCAP_DATA_DIR"]!, { recursive: true });

  let db: MongoServerHandle | undefined;
  const managed: Record<Exclude<Target, "db">, Managed> = {
    kernel: { killedByUs: false },
    "ledger-a": { killedByUs: false },
    "ledger-b": { killedByUs: false },
    worker: { killedByUs: false },
  };

  /** Every child started, so none outlives the pass whatever state its Managed slot is in. */
  const spawned: ChildProcess[] = [];
  const childOf = (m: Managed): ChildProcess | undefined => (m.proc === undefined ? undefined : "child" in m.proc ? m.proc.child : m.proc);
  const alive = (c: ChildProcess | undefined): boolean => c !== undefined && c.exitCode === null && c.signalCode === null;

  async function startDb(): Promise<void> {
    if (aborted) throw new Error("torture pass aborted");
    phase = "starting the database";
    db = await startMongoServer({ logger: createLogger("torture", "silent"), uri: "", embedded: opts.backend, dataDir: dbDir, listen: `127.0.0.1:${dbPort}` });
  }

  /** Set for the final recovery: services start with no fault point armed. */
  let finalPhase = false;
  function armFaultPoint(target: Target): string | undefined {
    if (finalPhase || random() >= (opts.faultPointRate ?? 0.25)) return undefined;
    const points =
      target === "kernel"
        ? ["journal.begin.before-journal", "journal.begin.after-journal", "journal.indeterminate.after-mark"]
        : target === "worker" || target === "db"
          ? []
          : ["ledger.write.after-spend"];
    if (points.length === 0) return undefined;
    const [lo, hi] = opts.faultPointAt ?? [1, 40];
    return `${points[Math.floor(random() * points.length)]!}@${between(lo, hi)}`;
  }

  async function startManaged(target: Exclude<Target, "db">): Promise<void> {
    if (aborted) throw new Error("torture pass aborted");
    phase = `starting ${target}`;
    const m = managed[target];
    m.killedByUs = false;
    m.armed = armFaultPoint(target);
    const faults: Record<string, string> = m.armed ? { KEYCAP_TEST_FAULT_POINTS: m.armed } : {};
    if (target === "worker") {
      incarnation++;
      const journal = path.join(work, `worker-${incarnation}.jsonl`);
      journals.push(journal);
      m.proc = spawnWorker(journal, String(incarnation), {});
      return;
    }
    const which = target === "kernel" ? "kernel" : "ledger";
    const listen: Record<string, string> =
      target === "kernel"
        ? { KEYCAP_KERNEL_LISTEN: kernelAddress }
        : { KEYCAP_LEDGER_LISTEN: target === "ledger-a" ? ledgerAddresses[0]! : ledgerAddresses[1]! };
    for (let tries = 1; ; tries++) {
      try {
        const proc = await startService(which, { ...baseEnv, ...listen, ...faults }, { readyTimeoutMs: 60_000 });
        spawned.push(proc.child);
        m.proc = proc;
        return;
      } catch (err) {
        // e.g. a fault point fired during start-up recovery, or the port is not free yet
        if (tries >= 20) throw err;
        progress(`${target} did not start (try ${tries}): ${(err instanceof Error ? err.message : String(err)).split("\n")[0]!.slice(0, 200)}`);
        await new Promise((r) => setTimeout(r, 250));
      }
    }
  }

  function spawnWorker(journal: string, inc: string, extra: Record<string, string>): ChildProcess {
    const out = fs.openSync(path.join(work, `worker-${inc}.out`), "a");
    const child = spawn(process.execPath, [path.join(__dirname, "worker.js")], {
      env: {
        PATH: process.env["PATH"] ?? "",
        HOME: process.env["HOME"] ?? "",
        KEYCAP_RUNTIME_TOKEN: RUNTIME_TOKEN,
        TORTURE_KERNEL: kernelAddress,
        TORTURE_LEDGERS: ledgerAddresses.join(","),
        TORTURE_LOG: journal,
        TORTURE_INCARNATION: inc,
        TORTURE_CONCURRENCY: String(opts.concurrency ?? 4),
        TORTURE_SEED: String(opts.seed),
        ...(opts.retention === false ? {} : { TORTURE_RETENTION_CALLS_SECONDS: SHORT_RETENTION["KEYCAP_RETENTION_CALLS_SECONDS"]! }),
        ...extra,
      },
      stdio: ["ignore", out, out],
    });
    fs.closeSync(out);
    spawned.push(child);
    return child;
  }

  /** SIGKILLs every child still running and waits (bounded) until each has exited. */
  async function killAll(): Promise<void> {
    await Promise.all(
      spawned.filter(alive).map(async (c) => {
        const exited = once(c, "exit");
        c.kill("SIGKILL");
        await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000).unref())]);
      }),
    );
  }

  /** Restarts whatever is down, the database first; counts deaths at fault points. */
  async function ensureUp(skipWorker = false): Promise<void> {
    if (db === undefined) await startDb();
    for (const target of ["kernel", "ledger-a", "ledger-b", "worker"] as const) {
      if (skipWorker && target === "worker") continue;
      const m = managed[target];
      const c = childOf(m);
      if (alive(c)) continue;
      if (c && !m.killedByUs && m.armed) {
        const point = `${target} ${m.armed.split("@")[0]!}`;
        faultPointKills[point] = (faultPointKills[point] ?? 0) + 1;
      }
      harvest(target, m);
      await startManaged(target);
    }
  }

  async function kill(target: Target): Promise<void> {
    phase = `killing ${target}`;
    kills[target]++;
    if (target === "db") {
      const killed = db;
      db = undefined;
      if (killed?.pid !== undefined) {
        try {
          process.kill(killed.pid, "SIGKILL");
        } catch {
          // already gone
        }
        await killed.exited;
      }
      return;
    }
    const m = managed[target];
    const c = childOf(m);
    m.killedByUs = true;
    if (alive(c)) {
      const exited = once(c!, "exit");
      c!.kill("SIGKILL");
      await exited;
    }
    harvest(target, m);
  }

  /** The watchdog's message: where the pass was and what its processes said last. */
  function stuck(ms: number): string {
    const tail = (file: string, lines: number): string => {
      try {
        return fs.readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join(" | ").slice(-600);
      } catch {
        return "(none)";
      }
    };
    const running = (Object.keys(managed) as Exclude<Target, "db">[])
      .map((t) => `${t} ${alive(childOf(managed[t])) ? `up (pid ${childOf(managed[t])!.pid})` : "down"}`)
      .join(", ");
    const journal = journals[journals.length - 1];
    // What each live service logged last: a kernel that stopped answering says why here.
    const said = (["kernel", "ledger-a", "ledger-b"] as const)
      .map((t) => {
        const p = managed[t].proc;
        if (p === undefined || !("output" in p)) return undefined;
        const lines = p.output().trimEnd().split("\n").slice(-6).join(" | ").slice(-1500);
        return `${t} said last: ${lines || "(nothing)"}`;
      })
      .filter((x): x is string => x !== undefined)
      .join("; ");
    return (
      `torture pass gave up after ${Math.round(ms / 1000)} s in phase "${phase}"; last progress: "${lastProgress}"; ` +
      `db ${db ? `up (pid ${db.pid})` : "down"}, ${running}; ` +
      `latest worker journal: ${journal ? tail(journal, 3) : "(none)"}; its output: ${journal ? tail(journal.replace(/\.jsonl$/, ".out"), 5) : "(none)"}; ${said}`
    );
  }

  const pass = async (): Promise<TortureReport> => {
    await ensureUp();
    for (let k = 0; k < opts.kills;) {
      phase = `load before kill ${k + 1}`;
      const [lo, hi] = opts.loadMs ?? [300, 1500];
      await new Promise((r) => setTimeout(r, between(lo, hi)));
      const first = TARGETS[Math.floor(random() * TARGETS.length)]!;
      const targets = new Set<Target>([first]);
      if (random() < 0.2 && k + 1 < opts.kills) targets.add(TARGETS[Math.floor(random() * TARGETS.length)]!);
      for (const t of targets) await kill(t);
      k += targets.size;
      await new Promise((r) => setTimeout(r, between(0, 400)));
      await ensureUp();
      if (process.env["KEYCAP_TORTURE_VERBOSE"] === "1" || k % 10 < targets.size)
        progress(`${k}/${opts.kills} kills ${JSON.stringify(kills)} fault points ${JSON.stringify(faultPointKills)}`);
    }
    // The end: the worker dies one last time, the services stay up, and a
    // recovery-only runtime finishes whatever is left. A service still armed with a fault
    // point is restarted unarmed first: one that fired during the final recovery stayed
    // down, and the finisher retried against it until the pass timed out (CI, 2026-12-05).
    await kill("worker");
    finalPhase = true;
    for (const t of ["kernel", "ledger-a", "ledger-b"] as const) if (managed[t].armed !== undefined && alive(childOf(managed[t]))) await kill(t);
    await ensureUp(true);
    let finalRecoveryClean = false;
    for (let pass = 0; pass < 5 && !finalRecoveryClean; pass++) {
      progress(`final recovery, pass ${pass + 1}`);
      await ensureUp(true);
      incarnation++;
      const journal = path.join(work, `worker-${incarnation}.jsonl`);
      journals.push(journal);
      if (aborted) throw new Error("torture pass aborted");
      const finisher = spawnWorker(journal, String(incarnation), { TORTURE_MODE: "recover-only" });
      phase = `final recovery pass ${pass + 1} (worker ${incarnation}, pid ${finisher.pid})`;
      const [code] = (await once(finisher, "exit")) as [number | null];
      finalRecoveryClean = code === 0;
    }
    progress(`checking (final recovery clean: ${finalRecoveryClean})`);
    phase = "checking";
    const result = await check(mongoUri, database, journals);
    await killAll();
    for (const [t, m] of Object.entries(managed)) harvest(t as Target, m);
    if (serviceErrorExamples.length > 0) result.examples["service unexpected error"] = serviceErrorExamples;
    const faultTotal = Object.values(faultPointKills).reduce((a, b) => a + b, 0);
    return {
      backend: opts.backend,
      seed: opts.seed,
      seconds: Math.round((Date.now() - started) / 1000),
      kills,
      faultPointKills,
      totalKills: Object.values(kills).reduce((a, b) => a + b, 0) + faultTotal,
      finalRecoveryClean,
      serviceErrors,
      pids: spawned.map((c) => c.pid).filter((pid): pid is number => pid !== undefined),
      ...result,
    };
  };

  let watchdog: NodeJS.Timeout | undefined;
  let run: Promise<TortureReport> | undefined;
  try {
    run = pass();
    if (opts.deadlineMs === undefined) return await run;
    const deadline = opts.deadlineMs;
    const expired = new Promise<never>((_, reject) => {
      watchdog = setTimeout(() => {
        aborted = true;
        reject(new Error(stuck(deadline)));
      }, deadline);
    });
    // Once the watchdog has fired, the pass's own ending (an "aborted" error) is moot.
    run.catch(() => undefined);
    return await Promise.race([run, expired]);
  } finally {
    clearTimeout(watchdog);
    await killAll();
    if (aborted && run) {
      // A start in flight when the watchdog fired adds its child after the kill above.
      await Promise.race([run.catch(() => undefined), new Promise((r) => setTimeout(r, 15_000).unref())]);
      await killAll();
    }
    await db?.stop();
    if (process.env["KEYCAP_TORTURE_KEEP"] !== "1") fs.rmSync(work, { recursive: true, force: true });
    else progress(`kept ${work}`);
  }
}
