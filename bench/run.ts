/**
 * `make bench` (`node dist/bench/run.js [--quick] [--soak] [--profile]`): what keycap's
 * enforcement costs, measured against a plain insert in the same run (bench/README.md).
 *
 * Starts MongoDB (the test harness), the kernel and the ledger as real processes, runs
 * the micro benchmarks pinned to one core, warms up, then drives each scenario for a
 * fixed time at each concurrency level, and writes the Markdown table (stdout), a JSON
 * record and an SVG chart (bench/results/). Every process it starts is stopped, also on
 * failure and on Ctrl-C.
 */
import { execFile, execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { parseArgs, promisify } from "node:util";
import { defineTool, KernelClient, LedgerClient } from "../clients/ts/src/index";
import { loadConfig } from "../services/common/src/config";
import { FERRETDB_VERSION } from "../services/common/src/embedded-mongo";
import { descriptorSetPath, projectRoot } from "../services/common/src/repo-paths";
import { BENCH_WRITE_TOOL_ID } from "./bench-ids";
import { benchKey, CapabilityFactory, newKeySpace, type PoolItem } from "./capabilities";
import { credentials, Metadata } from "@grpc/grpc-js";
import { BaselineServiceClient, type WriteRequest, type WriteResponse } from "../gen/ts/keycap/bench/v1/baseline";
import { CHUNK, ensureGhz, runGhzChunk } from "./ghz";
import { TEN_FIELD_DERIVATION, tenFieldArguments, type MicroResult } from "./micro";
import { measureSinkCosts, sinkCostMarkdown } from "./sink-cost";
import { measureClientCalls, type ClientCallsResult } from "./client-calls";
import { runClosedLoop } from "./node-driver";
import { machineCpuSeconds, memoryOf, ProcSampler, type ProcUsage } from "./proc-sampler";
import { profileMarkdown } from "./profile";
import { openInProcessPeer, type InProcessPeer } from "./peer-server";
import { attachRatios, attachSpreads } from "./ratios";
import { checkTargets, markdown, svgChart, type BenchRecord, type RunResult } from "./report";
import { BASELINE, BASELINE_AFTER, CALL, CALL_2X2, CALL_3HOP, CALL_UNARY, PEER, PEER_INPROC } from "./scenarios";
import { measureChain, type ChainRow, type ChainScenario } from "./chain";
import { measureRoundTrips, roundTripMarkdown } from "./round-trips";
import { startStack, type Stack } from "./stack";
import { crossPairs, RoundRobin } from "./round-robin";
import { LatencyRecorder, summarise } from "./stats";
import { interleavedPlan } from "./repetitions";

/**
 * How many of ledger-write's latest keys ledger-duplicate replays: well inside the ledger's
 * entry cache (20,000 entries), so the duplicates are of entries it holds.
 */
const RECENT_WRITES = 8000;
/** "db" CPU is the database server's process tree: on PostgreSQL the SQL runs in postgres backends. */
const DB_TREE: ReadonlySet<string> = new Set(["db"]);
/** A scenario's first ghz chunk at a level, before its rate is known: ~0.3–2 s on this machine. */
const PROBE_REQUESTS = 600;
/** The smallest later chunk (ghz's start-up is ~0.1 s; fewer requests would mostly measure it). */
const MIN_CHUNK = 200;

const WRITE_TOOL = BENCH_WRITE_TOOL_ID;
const CALL_TOOL = "bench.call";
const BASELINE_CALL = "keycap.bench.v1.BaselineService.Write";
const LEDGER_CALL = "keycap.ledger.v1.LedgerService.Write";
/** Concurrency levels call-2x2 runs at (where more processes could help). */
const CALL_2X2_LEVELS = [16, 64];
/** The node-driven scenarios, run after the ledger-only ones at each level, in this order. */
const WHOLE_EFFECT = [CALL, CALL_3HOP, CALL_UNARY, PEER, PEER_INPROC, CALL_2X2];
/** The chain pass (bench/chain.ts): the two shapes of the whole call, at these levels, after the scenarios. */
const CHAIN_LEVELS = [16, 64];
/** The payload of every write: 256 bytes, like a small JSON effect description. */
const PAYLOAD = Buffer.from(JSON.stringify({ kind: "charge", amount_cents: 129900, currency: "EUR", note: "x".repeat(180) }).padEnd(256, " "));

interface Options {
  quick: boolean;
  soak: boolean;
  soakSeconds: number;
  /** What the soak runs at c=64: ledger-write (default) or call (the whole call: kernel, journal and ledger). */
  soakScenario: string;
  profile: boolean;
  /** Which process --profile records: the ledger (ledger-write at c=64) or the kernel (call at c=64). */
  profileService: "ledger" | "kernel";
  /** Only the round-trip pass (a full run includes it). */
  roundTripsOnly: boolean;
  /** Only the sink SDKs' cost per request (a full run includes it). */
  sinkOnly: boolean;
  seconds: number;
  /** Interleaved repetitions of every scenario at every level (bench/repetitions.ts). */
  reps: number;
  warmupSeconds: number;
  microSeconds: number;
  concurrency: number[];
  scenarios: string[] | undefined;
  /** Where the JSON and SVG go (default bench/results). */
  resultsDir: string;
}

const log = (m: string): void => void process.stderr.write(`bench: ${m}\n`);

function options(): Options {
  const { values } = parseArgs({
    options: {
      quick: { type: "boolean", default: false },
      soak: { type: "boolean", default: false },
      "soak-seconds": { type: "string" },
      "soak-scenario": { type: "string" },
      profile: { type: "boolean", default: false },
      "round-trips": { type: "boolean", default: false },
      sink: { type: "boolean", default: false },
      "profile-service": { type: "string", default: "ledger" },
      seconds: { type: "string" },
      reps: { type: "string" },
      concurrency: { type: "string" },
      scenarios: { type: "string" },
      "results-dir": { type: "string" },
    },
  });
  const quick = values.quick === true;
  return {
    quick,
    soak: values.soak === true,
    soakSeconds: Number(values["soak-seconds"] ?? 300),
    soakScenario: values["soak-scenario"] ?? "ledger-write",
    profile: values.profile === true,
    roundTripsOnly: values["round-trips"] === true,
    sinkOnly: values.sink === true,
    profileService: values["profile-service"] === "kernel" ? "kernel" : "ledger",
    seconds: Number(values.seconds ?? (quick ? 2 : 6)),
    reps: Math.max(1, Number(values.reps ?? (quick ? 2 : 5))),
    warmupSeconds: quick ? 0.7 : 3,
    microSeconds: quick ? 0.3 : 2,
    concurrency: (values.concurrency ?? "1,16,64").split(",").map(Number),
    scenarios: values.scenarios?.split(","),
    resultsDir: path.resolve(values["results-dir"] ?? path.join(projectRoot(), "bench", "results")),
  };
}

/** One thing to measure. */
interface Scenario {
  name: string;
  driver: "ghz" | "node";
  /** The status every answer should have. */
  expected: "OK" | "PERMISSION_DENIED";
  /** ghz: the method. */
  call?: string;
  /**
   * Which processes serve it: ghz sends to the bench-only baseline process for
   * "baseline" (default the ledger); the "ledger" report column is the baseline or the
   * peer for those, the kernel and ledger columns sum the replicas for "replicas";
   * "inproc" is served inside this process (the in-process peer): no service process,
   * its CPU is the driver's.
   */
  target?: "ledger" | "baseline" | "peer" | "inproc" | "replicas";
  /** Only at these concurrency levels (default all). */
  levels?: number[];
  /** ghz: n requests (keys and capabilities), made just before they are sent. */
  items?: (n: number) => Promise<PoolItem[]>;
  /**
   * node: makes the operation for one measurement, `op(i)` for i = 0, 1, ... Called per
   * measurement so each gets keys of its own: a key reused from an earlier measurement
   * would be a duplicate (the kernel's recovery path, the peer's cache hit), not a new effect.
   */
  newOp?: () => (i: number) => Promise<unknown>;
}

interface Measured {
  seconds: number;
  latencies: LatencyRecorder;
  statuses: Record<string, number>;
  errorSamples: string[];
  usage: Record<string, ProcUsage>;
  invocations: number;
  /** Node driver: the whole machine's busy cores during the run (every process, other tenants too). */
  machineBusyCores?: number;
}

/** Adds one window's usage to an accumulated one. */
function addUsage(acc: Record<string, ProcUsage>, u: Record<string, ProcUsage>): void {
  for (const [k, v] of Object.entries(u)) {
    const a = acc[k];
    if (!a) {
      acc[k] = { ...v };
      continue;
    }
    a.cpuSeconds += v.cpuSeconds;
    a.peakRssMiB = Math.max(a.peakRssMiB, v.peakRssMiB);
    a.hwmMiB = v.hwmMiB;
    a.endRssMiB = v.endRssMiB;
  }
}

class Bench {
  /** Answers per second last seen per scenario and concurrency (`name@c`), to size the next ghz chunk. */
  private readonly rate = new Map<string, number>();
  private readonly tmp = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-bench-ghz-"));

  constructor(
    private readonly stack: Stack,
    private readonly ghzBin: string,
  ) {}

  async measure(sc: Scenario, concurrency: number, seconds: number): Promise<Measured> {
    const latencies = new LatencyRecorder();
    const statuses: Record<string, number> = {};
    const errorSamples: string[] = [];
    const usage: Record<string, ProcUsage> = {};
    const merge = (r: { latenciesMs: number[]; statuses: Record<string, number>; errorSamples: string[] }): void => {
      latencies.addAll(r.latenciesMs);
      for (const [k, v] of Object.entries(r.statuses)) statuses[k] = (statuses[k] ?? 0) + v;
      for (const e of r.errorSamples) if (errorSamples.length < 5 && !errorSamples.includes(e)) errorSamples.push(e);
    };
    let elapsed = 0;
    let invocations = 0;
    let machineBusyCores: number | undefined;
    if (sc.driver === "node") {
      const sampler = new ProcSampler(this.sampled(sc), 200, DB_TREE);
      const cpu0 = machineCpuSeconds();
      sampler.start();
      const r = await runClosedLoop(concurrency, seconds, sc.newOp!());
      addUsage(usage, sampler.stop());
      const cpu1 = machineCpuSeconds();
      if (cpu0 && cpu1) machineBusyCores = (cpu1.busy - cpu0.busy) / r.seconds;
      merge(r);
      elapsed = r.seconds;
    } else {
      // ghz has no deadline that keeps its request count (bench/ghz.ts): each chunk is sized
      // to the time left at the rate this scenario last ran at this level, or is a short
      // probe when it has not run yet; the last chunk may overrun by a fraction of a second.
      while (seconds - elapsed > 0.2) {
        const remaining = seconds - elapsed;
        const est = this.rate.get(`${sc.name}@${concurrency}`);
        const n = est === undefined ? PROBE_REQUESTS : Math.min(CHUNK, Math.max(MIN_CHUNK, Math.ceil(est * remaining)));
        const items = await sc.items!(n);
        const sampler = new ProcSampler(this.sampled(sc), 200, DB_TREE);
        sampler.start();
        const r = await runGhzChunk({
          bin: this.ghzBin,
          protoset: descriptorSetPath(),
          call: sc.call!,
          address: sc.target === "baseline" ? this.stack.baselineAddress : this.stack.ledgerAddress,
          concurrency,
          items,
          payload: PAYLOAD,
          workDir: this.tmp,
        });
        addUsage(usage, sampler.stop());
        merge(r);
        invocations++;
        elapsed += r.seconds;
        if (r.seconds > 0 && r.latenciesMs.length > 0) this.rate.set(`${sc.name}@${concurrency}`, r.latenciesMs.length / r.seconds);
        if (r.latenciesMs.length === 0) throw new Error(`ghz answered nothing for ${sc.name} at c=${concurrency}`);
      }
    }
    for (const u of Object.values(usage)) u.cores = u.cpuSeconds / elapsed;
    return { seconds: elapsed, latencies, statuses, errorSamples, usage, invocations, ...(machineBusyCores !== undefined ? { machineBusyCores } : {}) };
  }

  /**
   * The processes sampled for a scenario, by report column: for the baseline the
   * "ledger" column is the baseline process, the one serving those requests.
   */
  private sampled(sc: Scenario): Record<string, number> {
    const pids = this.stack.pids;
    // The peers have no kernel in their path: their rows leave the kernel columns empty.
    const peer = sc.target === "peer" || sc.target === "inproc";
    const out: Record<string, number> = peer ? {} : { kernel: pids["kernel"]! };
    // The in-process peer has no process of its own: no ledger column either.
    if (sc.target !== "inproc") out["ledger"] = pids["ledger"]!;
    if (pids["db"] !== undefined) out["db"] = pids["db"];
    if (sc.target === "baseline") out["ledger"] = pids["baseline"]!;
    if (sc.target === "peer") out["ledger"] = pids["peer"]!;
    if (peer) out["redis"] = pids["redis"]!;
    if (sc.target === "replicas") for (const [k, v] of Object.entries(pids)) if (/^(kernel|ledger)\d+$/.test(k)) out[k] = v;
    // The Node driver runs in this process: its CPU is the client's (for the in-process
    // peer, the client's and the peer's together: one process, one count).
    if (sc.driver === "node") out["driver"] = process.pid;
    return out;
  }

  cleanup(): void {
    fs.rmSync(this.tmp, { recursive: true, force: true });
  }
}

function toResult(sc: Scenario, concurrency: number, m: Measured): RunResult {
  const requests = m.latencies.count;
  const expected = m.statuses[sc.expected] ?? 0;
  const services: RunResult["services"] = {};
  for (const [k, u] of Object.entries(m.usage)) services[k] = { ...u, cpuMicrosPerRequest: requests ? (u.cpuSeconds * 1e6) / requests : Number.NaN };
  return {
    scenario: sc.name,
    driver: sc.driver,
    concurrency,
    seconds: m.seconds,
    requests,
    expected,
    errors: requests - expected,
    statuses: m.statuses,
    errorSamples: m.errorSamples,
    throughput: expected / m.seconds,
    latencyMs: summarise(m.latencies.values()),
    services,
    invocations: m.invocations,
    ...(m.machineBusyCores !== undefined ? { machineBusyCores: m.machineBusyCores } : {}),
  };
}

async function runMicroPinned(seconds: number): Promise<{ results: MicroResult[]; pinned: boolean }> {
  const script = path.join(projectRoot(), "dist/bench/micro.js");
  let pinned = true;
  try {
    execFileSync("taskset", ["-c", "0", "true"], { stdio: "ignore" });
  } catch {
    pinned = false;
  }
  const [cmd, args] = pinned ? ["taskset", ["-c", "0", process.execPath, script, String(seconds)]] : [process.execPath, [script, String(seconds)]];
  const { stdout } = await promisify(execFile)(cmd, args as string[], { maxBuffer: 1024 * 1024 });
  return { results: JSON.parse(stdout) as MicroResult[], pinned };
}

/** The ledger's verifier, one at a time, from the micro benchmarks (the sink table's reference row). */
function ledgerVerifyPerS(micro: readonly MicroResult[]): number | undefined {
  return micro.find((m) => m.name === "capability verify (1 in flight)")?.opsPerSecond;
}

function machine(): BenchRecord["machine"] {
  const cpus = os.cpus();
  return {
    cpuModel: cpus[0]?.model.trim() ?? "unknown",
    cores: cpus.length,
    memGiB: os.totalmem() / 2 ** 30,
    os: `${os.type()} ${os.release()}`,
    loadAvgAtStart: os.loadavg().map((v) => +v.toFixed(2)),
  };
}

function gitCommit(): string {
  try {
    const head = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: projectRoot(), encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
    const dirty =
      execFileSync("git", ["status", "--porcelain", "--untracked-files=no"], {
        cwd: projectRoot(),
        encoding: "utf8",
        stdio: ["ignore", "pipe", "ignore"],
      }).trim() !== "";
    return dirty ? `${head}+dirty` : head;
  } catch {
    return "unknown";
  }
}

async function main(): Promise<void> {
  const opts = options();
  const started = Date.now();
  const timestamp = new Date().toISOString().replace(/\.\d+Z$/, "Z");
  const machineInfo = machine();
  if (opts.roundTripsOnly) {
    process.stdout.write(roundTripMarkdown(await measureRoundTrips(PAYLOAD, opts.quick ? 50 : 200, log, opts.quick ? 3 : 5)));
    return;
  }
  if (opts.sinkOnly) {
    const micro = await runMicroPinned(opts.microSeconds);
    process.stdout.write(sinkCostMarkdown(await measureSinkCosts(opts.quick ? 1 : 5, log), ledgerVerifyPerS(micro.results)) + "\n");
    return;
  }
  const ghz = await ensureGhz(log);

  log(`micro benchmarks (${opts.microSeconds} s each)`);
  const micro = opts.profile ? { results: [], pinned: false } : await runMicroPinned(opts.microSeconds);

  const resultsDir = opts.resultsDir;
  fs.mkdirSync(resultsDir, { recursive: true });
  const profileDir = path.join(resultsDir, `profile-${timestamp.replace(/:/g, "")}`);

  log("starting MongoDB, kernel and ledger");
  const profFlags = ["--cpu-prof", `--cpu-prof-dir=${profileDir}`];
  const wanted = (name: string): boolean => !opts.profile && (!opts.scenarios || opts.scenarios.includes(name));
  const chainWanted = !opts.profile && !opts.scenarios;
  const stack = await startStack({
    ...(opts.profile ? (opts.profileService === "kernel" ? { kernelNodeFlags: profFlags } : { ledgerNodeFlags: profFlags }) : {}),
    ...(wanted(CALL_2X2) ? { replicas: 1 } : {}),
    ...(wanted(PEER) ? { peer: true } : {}),
    ...(wanted(PEER_INPROC) ? { redis: true } : {}),
    // The chain pass reads the kernel's and the ledger's metrics (a full or quick run).
    ...(chainWanted ? { metrics: true } : {}),
    log,
  });
  let stopping = false;
  const onSignal = (sig: string): void => {
    if (stopping) process.exit(1);
    stopping = true;
    log(`${sig}: stopping services`);
    void stack.stop().finally(() => process.exit(130));
  };
  process.on("SIGINT", () => onSignal("SIGINT"));
  process.on("SIGTERM", () => onSignal("SIGTERM"));
  log(`MongoDB backend: ${stack.mongo.backend}; kernel ${stack.kernelAddress}, ledger ${stack.ledgerAddress}; pids ${JSON.stringify(stack.pids)}`);

  const kernel = new KernelClient(stack.kernelAddress, { ledgerAddress: stack.ledgerAddress, token: stack.runtimeToken });
  const ledger = new LedgerClient(stack.ledgerAddress);
  const unaryKernel = new KernelClient(stack.kernelAddress, { ledgerAddress: stack.ledgerAddress, token: stack.runtimeToken, coalesce: false });
  // call-2x2: one client object per kernel/ledger pair, picked round robin.
  const kernelAddresses = [stack.kernelAddress, ...stack.replicas.map((r) => r.kernelAddress)];
  const ledgerAddresses = [stack.ledgerAddress, ...stack.replicas.map((r) => r.ledgerAddress)];
  const pairClients = crossPairs(kernelAddresses, ledgerAddresses).map(
    (p) => new KernelClient(p.kernel, { ledgerAddress: p.ledger, token: stack.runtimeToken }),
  );
  const scaled = new RoundRobin(pairClients);
  const peer = stack.peer ? new BaselineServiceClient(stack.peer.address, credentials.createInsecure()) : undefined;
  const bench = new Bench(stack, ghz.bin);
  const runs: RunResult[] = [];
  /** Every measurement, tagged with its repetition: the ratios' spread comes from these. */
  const repetitions: RunResult[] = [];
  let soak: BenchRecord["soak"];
  let clientCalls: ClientCallsResult[] | undefined;
  let chain: ChainRow[] | undefined;
  let chainScenarios: ChainScenario[] = [];
  const notes: string[] = [];
  let inproc: InProcessPeer | undefined;
  try {
    // The in-process peer: the gRPC peer's writer (bench/peer-server.ts) in this process, on
    // the ledger's database with the configuration the peer process loads, and the same Redis.
    if (wanted(PEER_INPROC) && stack.redis) inproc = await openInProcessPeer(loadConfig(stack.ledgerEnv), stack.mongo.uri, stack.redis.url);
    const factory = await CapabilityFactory.open(stack.signingKeyFile);
    await kernel.registerTool(
      defineTool({ id: CALL_TOOL, effect: { kind: "idempotent", key: { fields: TEN_FIELD_DERIVATION.fields as [string, ...string[]] } } }),
    );
    // Capabilities whose only role is to make baseline requests carry the same metadata
    // as enforced ones (the baseline ignores them): identical work for ghz.
    const filler = await factory.mint(CHUNK, WRITE_TOOL, (i) => benchKey("filler", i));
    // Keys written once, replayed by the duplicate scenario until ledger-write has run.
    const dupSpace = newKeySpace("dup");
    const dupKeys = Array.from({ length: opts.quick ? 1000 : 2000 }, (_, i) => benchKey(dupSpace, i));
    /** The latest keys ledger-write sent, oldest first: what ledger-duplicate replays. */
    let recentWrites: string[] = [];
    const pre = await factory.mint(dupKeys.length, WRITE_TOOL, (i) => dupKeys[i]!);
    let nextPre = 0;
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        for (let it = pre[nextPre++]; it; it = pre[nextPre++]) await ledger.writeWithCapability(it.token, { key: it.key, payload: PAYLOAD });
      }),
    );

    const all: Scenario[] = [
      {
        name: "ledger-write-baseline",
        driver: "ghz",
        expected: "OK",
        call: BASELINE_CALL,
        target: "baseline",
        items: async (n) => {
          const space = newKeySpace("base");
          return Array.from({ length: n }, (_, i) => ({ key: benchKey(space, i), token: filler[i % filler.length]!.token }));
        },
      },
      {
        name: "ledger-write",
        driver: "ghz",
        expected: "OK",
        call: LEDGER_CALL,
        items: (n) => {
          const space = newKeySpace("write");
          const keys = Array.from({ length: n }, (_, i) => benchKey(space, i));
          recentWrites = [...recentWrites, ...keys].slice(-RECENT_WRITES);
          return factory.mint(n, WRITE_TOOL, (i) => keys[i]!);
        },
      },
      {
        // A retry storm replays what was just written (ledger-write runs right before it at
        // each level): keys the ledger still holds in its entry cache. With keys it no
        // longer holds, each duplicate also reads its entry (bench/README, ADR 0021).
        name: "ledger-duplicate",
        driver: "ghz",
        expected: "OK",
        call: LEDGER_CALL,
        items: (n) => {
          const replayed = recentWrites.length > 0 ? recentWrites : dupKeys;
          return factory.mint(n, WRITE_TOOL, (i) => replayed[i % replayed.length]!, { attempt: 2 });
        },
      },
      {
        name: "ledger-denied",
        driver: "ghz",
        expected: "PERMISSION_DENIED",
        call: LEDGER_CALL,
        items: (n) => {
          const space = newKeySpace("denied");
          return factory.mint(n, WRITE_TOOL, (i) => benchKey(space, i), { requestKeyOf: (i) => benchKey(`${space}-wrong`, i) });
        },
      },
      {
        name: "call",
        driver: "node",
        expected: "OK",
        newOp: () => {
          const space = newKeySpace("call");
          return async (i: number): Promise<void> => {
            const handle = await kernel.begin(CALL_TOOL, { ...tenFieldArguments(i), order_id: `${space}-${i}` });
            await handle.write(PAYLOAD);
            await handle.complete("succeeded");
          };
        },
      },
      {
        // The whole call as an older client makes it (before ADR 0034): begin, write, then an
        // explicit CompleteCall, coalesced with the other calls' completes as the client's
        // default does. The kernel completes the call at once (its completion insert).
        name: CALL_3HOP,
        driver: "node",
        expected: "OK",
        newOp: () => {
          const space = newKeySpace("call3hop");
          return async (i: number): Promise<void> => {
            const handle = await kernel.begin(CALL_TOOL, { ...tenFieldArguments(i), order_id: `${space}-${i}` });
            await handle.write(PAYLOAD);
            await kernel.completeCall(handle.callId, "succeeded");
          };
        },
      },
      {
        // The same whole call, one RPC per BeginCall and per CompleteCall: what batching saves.
        name: CALL_UNARY,
        driver: "node",
        expected: "OK",
        newOp: () => {
          const space = newKeySpace("unary");
          return async (i: number): Promise<void> => {
            const handle = await unaryKernel.begin(CALL_TOOL, { ...tenFieldArguments(i), order_id: `${space}-${i}` });
            await handle.write(PAYLOAD);
            await handle.complete("succeeded");
          };
        },
      },
      {
        // The same effect through the peer: the caller supplies the idempotency key (here a
        // SHA-256 of its order id, base64url: as long as the key the kernel derives, so the
        // entry documents have the same size; bench/round-trips.ts checks it).
        name: PEER,
        driver: "node",
        expected: "OK",
        target: "peer",
        newOp: () => {
          const space = newKeySpace("peer");
          return (i: number): Promise<WriteResponse> =>
            new Promise((resolve, reject) => {
              if (!peer) return reject(new Error("no peer started"));
              peer.write({ key: benchKey(space, i), payload: PAYLOAD } satisfies WriteRequest, new Metadata(), (err, res) =>
                err ? reject(err) : resolve(res),
              );
            });
        },
      },
      {
        // The same peer inside this process, as a team embedding Powertools in the tool's
        // own process runs it: the same writer and keys as peer-powertools, no RPC.
        name: PEER_INPROC,
        driver: "node",
        expected: "OK",
        target: "inproc",
        newOp: () => {
          const space = newKeySpace("inproc");
          return (i: number): Promise<WriteResponse> => {
            if (!inproc) return Promise.reject(new Error("no in-process peer opened"));
            return inproc.writer.write({ key: benchKey(space, i), payload: PAYLOAD });
          };
        },
      },
      {
        name: CALL_2X2,
        driver: "node",
        expected: "OK",
        target: "replicas",
        levels: CALL_2X2_LEVELS,
        newOp: () => {
          const space = newKeySpace("call2x2");
          return async (i: number): Promise<void> => {
            const handle = await scaled.next().begin(CALL_TOOL, { ...tenFieldArguments(i), order_id: `${space}-${i}` });
            await handle.write(PAYLOAD);
            await handle.complete("succeeded");
          };
        },
      },
    ];
    const scenarios = all.filter((s) => !opts.scenarios || opts.scenarios.includes(s.name));

    if (opts.profile) {
      // The first of --scenarios when given (the ledger under the whole call: --scenarios call).
      const name = opts.scenarios?.[0] ?? (opts.profileService === "kernel" ? "call" : "ledger-write");
      const target = scenarios.find((s) => s.name === name)!;
      log(`profile: warm-up, then ${target.name} at c=64 for ${opts.seconds} s with --cpu-prof on the ${opts.profileService}`);
      await bench.measure(target, 16, opts.warmupSeconds);
      const m = await bench.measure(target, 64, opts.seconds);
      runs.push(toResult(target, 64, m));
    } else {
      log(`warm-up: ${opts.warmupSeconds} s per scenario at c=16`);
      for (const sc of scenarios) await bench.measure(sc, 16, opts.warmupSeconds);
      // The baseline runs first and again last at each level: the database slows as it
      // fills (FerretDB's SQLite checkpoints, table growth), so a baseline measured only
      // before the enforced scenarios would flatter or penalise them by position alone.
      // Ratios are taken against the mean of the two, within each repetition.
      const baseline = scenarios.find((s) => s.name === BASELINE);
      const orderAt = (c: number): Scenario[] => {
        // The whole effect (`call`, the peers, `call-2x2`: the kernel's journal plus a
        // write, or the peer's Redis plus the insert) goes last, after the second baseline,
        // in WHOLE_EFFECT's order: the in-process peer right after the gRPC one.
        const atLevel = scenarios.filter((s) => !s.levels || s.levels.includes(c));
        const ledgerOnly = atLevel.filter((s) => !WHOLE_EFFECT.includes(s.name));
        const whole = WHOLE_EFFECT.flatMap((n) => atLevel.filter((s) => s.name === n));
        return [...ledgerOnly, ...(baseline ? [{ ...baseline, name: BASELINE_AFTER }] : []), ...whole];
      };
      const pooled = new Map<string, { sc: Scenario; c: number; measured: Measured[] }>();
      for (const { rep, level: c, scenario: sc } of interleavedPlan(opts.reps, opts.concurrency, orderAt)) {
        const m = await bench.measure(sc, c, opts.seconds);
        const r = { ...toResult(sc, c, m), rep };
        repetitions.push(r);
        const k = `${sc.name}@${c}`;
        const slot = pooled.get(k) ?? { sc, c, measured: [] };
        slot.measured.push(m);
        pooled.set(k, slot);
        log(
          `rep ${rep + 1}/${opts.reps} ${sc.name} c=${c}: ${r.throughput.toFixed(0)}/s p50 ${r.latencyMs.p50.toFixed(2)} ms p99 ${r.latencyMs.p99.toFixed(2)} ms errors ${r.errors}` +
            (r.errorSamples.length && r.errors ? ` (${r.errorSamples[0]})` : ""),
        );
      }
      // The table's row per scenario and level: every repetition's answers pooled.
      for (const { sc, c, measured } of pooled.values()) runs.push(toResult(sc, c, mergeMeasured(measured)));
      // The Go and Python clients' batching, on the same stack, after the scenarios.
      if (!opts.profile && !opts.scenarios) clientCalls = await measureClientCalls(stack, [16, 64], opts.quick ? 4 : 12, log);
      // The chain: where the two shapes of the whole call spend their time (bench/chain.ts).
      if (chainWanted) {
        const byName = (n: string): Scenario => all.find((s) => s.name === n)!;
        chainScenarios = [
          { name: CALL, newOp: byName(CALL).newOp!, path: ["BeginCall", "Write"] },
          { name: CALL_3HOP, newOp: byName(CALL_3HOP).newOp!, path: ["BeginCall", "Write", "CompleteCall"] },
        ];
        log(
          `chain: ${chainScenarios.map((c) => c.name).join(", ")} at c=${CHAIN_LEVELS.join(", ")}, ${opts.quick ? 2 : 6} s each, metrics scraped before and after`,
        );
        chain = await measureChain(stack, chainScenarios, CHAIN_LEVELS, opts.quick ? 2 : 6, log);
      }
      if (opts.soak) {
        const target = all.find((s) => s.name === opts.soakScenario);
        if (!target) throw new Error(`--soak-scenario ${opts.soakScenario}: no such scenario`);
        soak = await runSoak(bench, target, stack, opts.soakSeconds);
      }
    }
  } finally {
    kernel.close();
    unaryKernel.close();
    ledger.close();
    for (const c of pairClients) c.close();
    peer?.close();
    await inproc?.close().catch((err: unknown) => log(`closing the in-process peer: ${err instanceof Error ? err.message : String(err)}`));
    bench.cleanup();
    log("stopping services");
    await stack.stop();
  }

  // Counted on a stack of its own: the taps add a hop no throughput run should carry.
  const roundTrips = opts.profile || opts.scenarios ? undefined : await measureRoundTrips(PAYLOAD, opts.quick ? 50 : 200, log, opts.quick ? 3 : 5);
  const sinkCost = opts.profile || opts.scenarios ? undefined : await measureSinkCosts(opts.quick ? 1 : 5, log);

  for (let rep = 0; rep < opts.reps; rep++) attachRatios(repetitions.filter((r) => r.rep === rep));
  if (opts.profile) attachRatios(runs);
  else attachSpreads(runs, repetitions);
  if (machineInfo.cores <= 2) {
    notes.push(
      `${machineInfo.cores} cores: ghz (or the Node driver), the ledger, the kernel and the database share them; absolute numbers are bounded by that, ratios are the result.`,
    );
  }
  const pkg = JSON.parse(fs.readFileSync(path.join(projectRoot(), "package.json"), "utf8")) as { version: string };
  const rec: BenchRecord = {
    timestamp,
    mode: opts.quick ? "quick" : "full",
    machine: machineInfo,
    versions: {
      node: process.version,
      ghz: ghz.version,
      keycap: pkg.version,
      gitCommit: gitCommit(),
      mongoBackend: stack.mongo.backend,
      mongoBackendReason: stack.mongo.reason,
      ...(stack.mongo.backend === "ferretdb-sqlite" ? { ferretdb: `${FERRETDB_VERSION} (SQLite)` } : {}),
      ...(stack.mongo.backend === "ferretdb-pg" ? { ferretdb: `${FERRETDB_VERSION} (PostgreSQL)` } : {}),
      ...(stack.redis
        ? {
            redis: stack.redis.version,
            powertoolsIdempotency: packageVersion("@aws-lambda-powertools/idempotency"),
            redisClient: packageVersion("@redis/client"),
          }
        : {}),
    },
    parameters: {
      concurrency: opts.concurrency,
      secondsPerRun: opts.seconds,
      repetitions: opts.reps,
      warmupSeconds: opts.warmupSeconds,
      payloadBytes: PAYLOAD.length,
      ghzChunk: CHUNK,
      ghzConnections: 1,
      microSecondsEach: opts.microSeconds,
      microPinnedToOneCore: micro.pinned,
    },
    micro: micro.results,
    runs,
    ...(repetitions.length > 0 ? { repetitions } : {}),
    targets: [],
    ...(soak ? { soak } : {}),
    ...(roundTrips ? { roundTrips } : {}),
    ...(sinkCost ? { sinkCost } : {}),
    ...(clientCalls ? { clientCalls } : {}),
    ...(chain ? { chain: { rows: chain, paths: chainScenarios.map((c) => ({ name: c.name, path: [...c.path] })) } } : {}),
    notes,
  };
  rec.targets = checkTargets(runs, micro.results, soak, roundTrips, repetitions);

  if (opts.profile) {
    const files = fs.existsSync(profileDir) ? fs.readdirSync(profileDir).filter((f) => f.endsWith(".cpuprofile")) : [];
    if (files.length === 0) throw new Error(`no .cpuprofile written under ${profileDir}`);
    process.stdout.write(markdown(rec));
    process.stdout.write("\n" + profileMarkdown(path.join(profileDir, files[0]!)));
    log(`profile: ${path.join(profileDir, files[0]!)}`);
    return;
  }
  const base = path.join(resultsDir, timestamp.replace(/:/g, ""));
  fs.writeFileSync(`${base}.json`, JSON.stringify(rec, null, 2) + "\n");
  const svg = svgChart(rec);
  fs.writeFileSync(`${base}.svg`, svg);
  // Only a full run is "the latest results"; a quick, partial or soak run keeps its own files.
  if (!opts.quick && !opts.scenarios) fs.writeFileSync(path.join(resultsDir, "latest.svg"), svg);
  process.stdout.write(markdown(rec));
  log(`wrote ${base}.json and ${base}.svg in ${((Date.now() - started) / 1000).toFixed(0)} s`);
}

/** One scenario's measurements at one level, pooled: answers, statuses and CPU summed over their time. */
function mergeMeasured(ms: Measured[]): Measured {
  const latencies = new LatencyRecorder();
  const statuses: Record<string, number> = {};
  const errorSamples: string[] = [];
  const usage: Record<string, ProcUsage> = {};
  let seconds = 0;
  let invocations = 0;
  let busyCoreSeconds = 0;
  let busySeconds = 0;
  for (const m of ms) {
    latencies.addAll(m.latencies.values());
    for (const [k, v] of Object.entries(m.statuses)) statuses[k] = (statuses[k] ?? 0) + v;
    for (const e of m.errorSamples) if (errorSamples.length < 5 && !errorSamples.includes(e)) errorSamples.push(e);
    addUsage(usage, m.usage);
    seconds += m.seconds;
    invocations += m.invocations;
    if (m.machineBusyCores !== undefined) {
      busyCoreSeconds += m.machineBusyCores * m.seconds;
      busySeconds += m.seconds;
    }
  }
  for (const u of Object.values(usage)) u.cores = u.cpuSeconds / seconds;
  return { seconds, latencies, statuses, errorSamples, usage, invocations, ...(busySeconds > 0 ? { machineBusyCores: busyCoreSeconds / busySeconds } : {}) };
}

/** The installed version of a package (its package.json). */
function packageVersion(name: string): string {
  try {
    const file = path.join(projectRoot(), "node_modules", name, "package.json");
    return (JSON.parse(fs.readFileSync(file, "utf8")) as { version?: string }).version ?? "unknown";
  } catch {
    return "unknown";
  }
}

/** ledger-write at c=64 for a long time; the ledger's RSS at start and end, and every 10 s. */
async function runSoak(bench: Bench, write: Scenario, stack: Stack, seconds: number): Promise<NonNullable<BenchRecord["soak"]>> {
  log(`soak: ${write.name} at c=64 for ${seconds} s`);
  const ledgerStart = memoryOf(stack.pids["ledger"]!)?.rssMiB ?? Number.NaN;
  const kernelStart = memoryOf(stack.pids["kernel"]!)?.rssMiB ?? Number.NaN;
  const t0 = Date.now();
  const timeline: { t: number; ledgerRssMiB: number; kernelRssMiB?: number }[] = [{ t: 0, ledgerRssMiB: ledgerStart, kernelRssMiB: kernelStart }];
  const timer = setInterval(
    () =>
      timeline.push({
        t: Math.round((Date.now() - t0) / 1000),
        ledgerRssMiB: memoryOf(stack.pids["ledger"]!)?.rssMiB ?? Number.NaN,
        kernelRssMiB: memoryOf(stack.pids["kernel"]!)?.rssMiB ?? Number.NaN,
      }),
    10_000,
  );
  try {
    const r = toResult(write, 64, await bench.measure(write, 64, seconds));
    return {
      scenario: write.name,
      seconds: r.seconds,
      concurrency: 64,
      requests: r.requests,
      throughput: r.throughput,
      rssMiB: {
        ledgerStart,
        ledgerEnd: memoryOf(stack.pids["ledger"]!)?.rssMiB ?? Number.NaN,
        kernelStart,
        kernelEnd: memoryOf(stack.pids["kernel"]!)?.rssMiB ?? Number.NaN,
      },
      timeline,
    };
  } finally {
    clearInterval(timer);
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
