/**
 * What a benchmark run produces: the Markdown table printed on stdout, the JSON record
 * under bench/results/, and a hand-written SVG chart of throughput and p99 per scenario
 * and concurrency.
 */
import { CALL_AT_LOAD_LANES, CALL_AT_LOAD_OPERATION, CALL_OPERATION, roundTripMarkdown, type RoundTripReport } from "./round-trips";
import type { MicroResult } from "./micro";
import { sinkCostMarkdown, type SinkCostResult } from "./sink-cost";
import { clientCallsMarkdown, type ClientCallsResult } from "./client-calls";
import type { ProcUsage } from "./proc-sampler";
import type { LatencySummary } from "./stats";
import { formatSpread, type SpreadRatio } from "./repetitions";
import { CALL, CALL_2X2, CALL_3HOP, CALL_UNARY, PEER, PEER_INPROC } from "./scenarios";
import { chainMarkdown, type ChainRow } from "./chain";

/** A ratio between two scenarios; on a pooled row, the median of the repetitions' ratios with their range. */
export interface Ratio {
  throughput: number;
  p99: number;
  spread?: { throughput: SpreadRatio; p99: SpreadRatio };
}

/** One scenario at one concurrency. */
export interface RunResult {
  scenario: string;
  driver: "ghz" | "node";
  concurrency: number;
  /** Which repetition (0-based) this measurement was; absent on a pooled row. */
  rep?: number;
  /** Measured time (sum of the load generator's own run times), seconds. */
  seconds: number;
  requests: number;
  /** Answers with the scenario's expected status (OK, or PERMISSION_DENIED for ledger-denied). */
  expected: number;
  /** Answers with any other status. */
  errors: number;
  statuses: Record<string, number>;
  errorSamples: string[];
  /** expected / seconds. */
  throughput: number;
  /** Over all answers, milliseconds. */
  latencyMs: LatencySummary;
  /** Ratios to ledger-write-baseline at the same concurrency, in the same run. */
  vsBaseline?: Ratio;
  /** `call`, `call-3hop` and `call-2x2`: ratios to `peer-powertools` (the gRPC peer) at the same concurrency, in the same run. */
  vsPeer?: Ratio;
  /** `call`, `call-3hop` and `call-2x2`: ratios to `peer-inproc` (the peer inside the load driver) at the same concurrency, in the same run. */
  vsInproc?: Ratio;
  /** `call-2x2`, `call-unary`, `call-3hop`: ratios to the single-process `call` at the same concurrency, in the same run. */
  vsCall?: Ratio;
  /**
   * Resource use of each process during the run: "ledger" (or the baseline / peer serving
   * the scenario), "kernel", "db"; "kernel2", "ledger2" for replicas, "redis" for the peers,
   * "driver" (this process) for the Node driver. `peer-inproc` has no "ledger": the peer
   * runs in the driver, so "driver" is the load driver and the peer together.
   */
  services: Record<string, ProcUsage & { cpuMicrosPerRequest: number }>;
  /** ghz invocations (chunks) the run took. */
  invocations: number;
  /**
   * Node driver: the whole machine's busy cores during the run, from /proc/stat: every
   * process, PostgreSQL's backends (children of FerretDB's wrapper, not in `db`) and other
   * tenants included.
   */
  machineBusyCores?: number;
}

/** A target of the issue, checked against this run. */
export interface TargetCheck {
  target: string;
  measured: string;
  met: boolean | undefined;
}

/** Everything one run records. */
export interface BenchRecord {
  timestamp: string;
  mode: "quick" | "full";
  machine: { cpuModel: string; cores: number; memGiB: number; os: string; loadAvgAtStart: number[] };
  versions: {
    node: string;
    ghz: string;
    keycap: string;
    gitCommit: string;
    mongoBackend: string;
    mongoBackendReason: string;
    ferretdb?: string;
    /** The peer scenarios' Redis (`redis-server --version`) and libraries. */
    redis?: string;
    powertoolsIdempotency?: string;
    redisClient?: string;
  };
  parameters: {
    concurrency: number[];
    secondsPerRun: number;
    /** Interleaved repetitions per scenario and level (absent in records from before they existed: 1). */
    repetitions?: number;
    warmupSeconds: number;
    payloadBytes: number;
    ghzChunk: number;
    ghzConnections: number;
    microSecondsEach: number;
    microPinnedToOneCore: boolean;
  };
  micro: MicroResult[];
  /** One row per scenario and level, every repetition's answers pooled; ratios are medians over repetitions. */
  runs: RunResult[];
  /** Every measurement, tagged with its repetition. */
  repetitions?: RunResult[];
  targets: TargetCheck[];
  soak?: {
    /** What ran (ledger-write unless --soak-scenario said otherwise). */
    scenario?: string;
    seconds: number;
    concurrency: number;
    requests: number;
    throughput: number;
    rssMiB: { ledgerStart: number; ledgerEnd: number; kernelStart: number; kernelEnd: number };
    timeline: { t: number; ledgerRssMiB: number; kernelRssMiB?: number }[];
  };
  /** The round-trip pass (bench/round-trips.ts): database commands, bytes and log lines per operation. */
  roundTrips?: RoundTripReport;
  /** Sink SDKs' cost per request, each language (bench/sink-cost.ts). */
  sinkCost?: SinkCostResult[];
  /** The Go and Python clients' batching of concurrent calls, per language (issue 33). */
  clientCalls?: ClientCallsResult[];
  /** The chain pass (bench/chain.ts): per-stage server-side latency of the whole call's two shapes. */
  chain?: { rows: ChainRow[]; paths: { name: string; path: string[] }[] };
  notes: string[];
}

const fmt = (v: number, digits = 1): string => (Number.isFinite(v) ? v.toFixed(digits) : "–");
const fmtInt = (v: number): string => (Number.isFinite(v) ? Math.round(v).toLocaleString("en-US") : "–");
/** A ratio's throughput or p99, with the repetitions' range when there were several. */
const fmtRatio = (r: Ratio | undefined, which: "throughput" | "p99"): string =>
  r === undefined ? "–" : r.spread ? formatSpread(r.spread[which]) : fmt(r[which], 2);

/** The Markdown report (tables of runs, micro benchmarks and targets). */
export function markdown(rec: BenchRecord): string {
  const lines: string[] = [];
  lines.push(`### keycap bench — ${rec.timestamp} (${rec.mode})`);
  lines.push("");
  lines.push(
    `${rec.machine.cpuModel}, ${rec.machine.cores} cores, ${fmt(rec.machine.memGiB)} GiB; node ${rec.versions.node}; ghz ${rec.versions.ghz}; ` +
      `MongoDB backend: ${rec.versions.mongoBackend}${rec.versions.ferretdb ? ` ${rec.versions.ferretdb}` : ""}; ${rec.parameters.secondsPerRun} s per run, ` +
      `${rec.parameters.repetitions ?? 1} interleaved repetitions (ratios: median of the repetitions' ratios, their range in brackets)`,
  );
  lines.push("");
  lines.push(
    "| scenario | driver | c | req/s | p50 ms | p90 ms | p99 ms | max ms | errors | ×base req/s | ×base p99 | ledger CPU µs/req | ledger peak RSS MiB | kernel CPU µs/req | kernel peak RSS MiB | db CPU µs/req |",
  );
  lines.push("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
  for (const r of rec.runs) {
    // The kernel and ledger columns sum the replicas' CPU (kernel + kernel2 ...) and show the largest RSS.
    const s = (n: string): { cpuMicrosPerRequest: number; peakRssMiB: number } | undefined => group(r, n);
    lines.push(
      `| ${r.scenario} | ${r.driver} | ${r.concurrency} | ${fmtInt(r.throughput)} | ${fmt(r.latencyMs.p50, 2)} | ${fmt(r.latencyMs.p90, 2)} | ${fmt(r.latencyMs.p99, 2)} | ${fmt(r.latencyMs.max, 1)} | ${r.errors} | ` +
        `${fmtRatio(r.vsBaseline, "throughput")} | ${fmtRatio(r.vsBaseline, "p99")} | ` +
        `${fmtInt(s("ledger")?.cpuMicrosPerRequest ?? Number.NaN)} | ${fmt(s("ledger")?.peakRssMiB ?? Number.NaN, 0)} | ` +
        `${fmtInt(s("kernel")?.cpuMicrosPerRequest ?? Number.NaN)} | ${fmt(s("kernel")?.peakRssMiB ?? Number.NaN, 0)} | ${fmtInt(s("db")?.cpuMicrosPerRequest ?? Number.NaN)} |`,
    );
  }
  const whole = wholeEffectMarkdown(rec);
  if (whole) {
    lines.push("");
    lines.push(whole);
  }
  lines.push("");
  lines.push(`| micro benchmark${rec.parameters.microPinnedToOneCore ? " (one core)" : ""} | best ops/s | median ops/s | what |`);
  lines.push("| --- | ---: | ---: | --- |");
  for (const m of rec.micro) lines.push(`| ${m.name} | ${fmtInt(m.opsPerSecond)} | ${fmtInt(m.medianOpsPerSecond)} | ${m.note} |`);
  lines.push("");
  if (rec.sinkCost) {
    lines.push(sinkCostMarkdown(rec.sinkCost, rec.micro.find((m) => m.name === "capability verify (1 in flight)")?.opsPerSecond));
    lines.push("");
  }
  if (rec.clientCalls) {
    lines.push(clientCallsMarkdown(rec.clientCalls));
    lines.push("");
  }
  if (rec.chain) {
    lines.push(chainMarkdown(rec.chain.rows, rec.chain.paths));
    lines.push("");
  }
  lines.push("| target (issue 7) | measured | met |");
  lines.push("| --- | --- | --- |");
  for (const t of rec.targets) lines.push(`| ${t.target} | ${t.measured} | ${t.met === undefined ? "n/a" : t.met ? "yes" : "**no**"} |`);
  if (rec.roundTrips) {
    lines.push("");
    lines.push(
      "Per operation, one at a time through wire taps, each for a few seconds (its calls and time in the first column) so the kernel's per-second writes are amortised as at load; " +
        "`hops / op`: RPCs the kernel and the ledger answered per operation (their metrics), or the client's calls to the baseline and the peer; `all`: database commands of every service together:",
    );
    lines.push("");
    lines.push(roundTripMarkdown(rec.roundTrips));
  }
  if (rec.soak) {
    lines.push("");
    const k = rec.soak.rssMiB;
    lines.push(
      `Soak (${rec.soak.scenario ?? "ledger-write"}): ${rec.soak.seconds} s at c=${rec.soak.concurrency}, ${fmtInt(rec.soak.throughput)} req/s; ledger RSS ${fmt(k.ledgerStart)} → ${fmt(k.ledgerEnd)} MiB, kernel RSS ${fmt(k.kernelStart)} → ${fmt(k.kernelEnd)} MiB.`,
    );
  }
  for (const n of rec.notes) lines.push(`\n> ${n}`);
  return lines.join("\n") + "\n";
}

/** A process and its replicas (`kernel`, `kernel2`, ...): CPU summed, RSS the largest; undefined if none was sampled. */
export function group(r: RunResult, name: string): { cpuMicrosPerRequest: number; cpuSeconds: number; peakRssMiB: number } | undefined {
  const members = Object.entries(r.services).filter(([k]) => k === name || new RegExp(`^${name}\\d+$`).test(k));
  if (members.length === 0) return undefined;
  const cpuSeconds = members.reduce((n, [, u]) => n + u.cpuSeconds, 0);
  return {
    cpuSeconds,
    cpuMicrosPerRequest: r.requests ? (cpuSeconds * 1e6) / r.requests : Number.NaN,
    peakRssMiB: Math.max(...members.map(([, u]) => u.peakRssMiB)),
  };
}

/** Cores the sampled processes kept busy during a run: their CPU seconds over the run's seconds. */
export function busyCores(r: RunResult): number {
  return Object.values(r.services).reduce((n, u) => n + u.cpuSeconds, 0) / r.seconds;
}

/** `call` against the two peers and against itself on two kernels and two ledgers, per concurrency; "" when none of those ran. */
export function wholeEffectMarkdown(rec: BenchRecord): string {
  const at = (name: string, c: number): RunResult | undefined => rec.runs.find((r) => r.scenario === name && r.concurrency === c);
  const cs = [...new Set(rec.runs.filter((r) => r.scenario === PEER || r.scenario === PEER_INPROC || r.scenario === CALL_2X2).map((r) => r.concurrency))].sort(
    (a, b) => a - b,
  );
  if (cs.length === 0) return "";
  const rate = (r: RunResult | undefined): string => (r ? fmtInt(r.throughput) : "–");
  const p99 = (r: RunResult | undefined): string => (r ? fmt(r.latencyMs.p99, 1) : "–");
  const cpu = (r: RunResult | undefined, ...names: string[]): string =>
    r
      ? names
          .map((n) => [n, group(r, n)] as const)
          .filter(([, g]) => g !== undefined)
          .map(([n, g]) => `${n} ${fmtInt(g!.cpuMicrosPerRequest)}`)
          .join(", ")
      : "–";
  const lines: string[] = [];
  lines.push(
    "Whole effect: keycap's `call` against the peer (Powertools idempotency on Redis, same insert) as a gRPC service (`peer`) and inside the load driver (`in-proc`), and on two kernels + two ledgers:",
  );
  lines.push("");
  lines.push(
    "| c | call req/s | call p99 ms | peer req/s | peer p99 ms | call ÷ peer req/s | call ÷ peer p99 | in-proc req/s | in-proc p99 ms | call ÷ in-proc req/s | call ÷ in-proc p99 | call-2x2 req/s | call-2x2 p99 ms | 2x2 ÷ call req/s | cores busy: ours (machine) call / peer / in-proc / 2x2 |",
  );
  lines.push("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
  for (const c of cs) {
    const call = at(CALL, c);
    const peer = at(PEER, c);
    const inproc = at(PEER_INPROC, c);
    const x2 = at(CALL_2X2, c);
    const cores = [call, peer, inproc, x2]
      .map((r) => (r ? `${fmt(busyCores(r), 2)} (${r.machineBusyCores !== undefined ? fmt(r.machineBusyCores, 2) : "–"})` : "–"))
      .join(" / ");
    lines.push(
      `| ${c} | ${rate(call)} | ${p99(call)} | ${rate(peer)} | ${p99(peer)} | ${fmtRatio(call?.vsPeer, "throughput")} | ${fmtRatio(call?.vsPeer, "p99")} | ` +
        `${rate(inproc)} | ${p99(inproc)} | ${fmtRatio(call?.vsInproc, "throughput")} | ${fmtRatio(call?.vsInproc, "p99")} | ` +
        `${rate(x2)} | ${p99(x2)} | ${fmtRatio(x2?.vsCall, "throughput")} | ${cores} |`,
    );
  }
  if (cs.some((c) => at(CALL_3HOP, c))) {
    lines.push("");
    lines.push(
      "Before and after ADR 0034, in the same repetitions: `call-3hop` is the whole call as an older client makes it (BeginCall → Write → CompleteCall: three hops, the kernel's completion insert), `call` as the client makes it now (BeginCall → Write: the ledger's entry completes the call):",
    );
    lines.push("");
    lines.push(
      "| c | before: call-3hop req/s | p99 ms | ÷ gRPC peer req/s | ÷ in-proc req/s | after: call req/s | p99 ms | ÷ gRPC peer req/s | ÷ in-proc req/s | 3hop ÷ call req/s | 3hop ÷ call p99 |",
    );
    lines.push("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (const c of cs) {
      const before = at(CALL_3HOP, c);
      const after = at(CALL, c);
      lines.push(
        `| ${c} | ${rate(before)} | ${p99(before)} | ${fmtRatio(before?.vsPeer, "throughput")} | ${fmtRatio(before?.vsInproc, "throughput")} | ` +
          `${rate(after)} | ${p99(after)} | ${fmtRatio(after?.vsPeer, "throughput")} | ${fmtRatio(after?.vsInproc, "throughput")} | ` +
          `${fmtRatio(before?.vsCall, "throughput")} | ${fmtRatio(before?.vsCall, "p99")} |`,
      );
    }
  }
  if (cs.some((c) => at(CALL_UNARY, c))) {
    lines.push("");
    lines.push(
      "Batched begins and completes (`call`, ADR 0022) against one RPC per BeginCall and per CompleteCall (`call-unary`, same client with coalescing off):",
    );
    lines.push("");
    lines.push("| c | call req/s | call-unary req/s | unary ÷ call req/s | unary ÷ call p99 | CPU µs per call: call-unary |");
    lines.push("| ---: | ---: | ---: | ---: | ---: | --- |");
    for (const c of cs) {
      const u = at(CALL_UNARY, c);
      if (!u) continue;
      lines.push(
        `| ${c} | ${rate(at(CALL, c))} | ${rate(u)} | ${fmtRatio(u.vsCall, "throughput")} | ${fmtRatio(u.vsCall, "p99")} | ${cpu(u, "kernel", "ledger", "db", "driver")} |`,
      );
    }
  }
  lines.push("");
  lines.push(
    "| c | CPU µs per call: call | call-3hop | peer-powertools | peer-inproc (peer and load driver are one process: `peer+driver`) | call-2x2 (kernel and ledger summed over both) |",
  );
  lines.push("| ---: | --- | --- | --- | --- | --- |");
  for (const c of cs) {
    lines.push(
      `| ${c} | ${cpu(at(CALL, c), "kernel", "ledger", "db", "driver")} | ${cpu(at(CALL_3HOP, c), "kernel", "ledger", "db", "driver")} | ${cpu(at(PEER, c), "ledger", "redis", "db", "driver").replace(/^ledger/, "peer")} | ` +
        `${cpu(at(PEER_INPROC, c), "driver", "redis", "db").replace(/^driver/, "peer+driver")} | ${cpu(at(CALL_2X2, c), "kernel", "ledger", "db", "driver")} |`,
    );
  }
  return lines.join("\n");
}

/**
 * Each repetition's own p99, in the order they ran (` (repetitions 39.7, 38.3, 50.1 ms)`), or ""
 * with one: the target is checked on the pooled answers, and a repetition over it should show.
 */
export function repetitionP99s(repetitions: readonly RunResult[], scenario: string, concurrency: number): string {
  const p99s = repetitions.filter((r) => r.scenario === scenario && r.concurrency === concurrency).map((r) => fmt(r.latencyMs.p99, 1));
  return p99s.length > 1 ? ` (repetitions ${p99s.join(", ")} ms)` : "";
}

/** Checks the issue's targets against a run (pooled); `repetitions`, every measurement apart. */
export function checkTargets(
  runs: RunResult[],
  micro: MicroResult[],
  soak: BenchRecord["soak"],
  roundTrips?: RoundTripReport,
  repetitions: readonly RunResult[] = [],
): TargetCheck[] {
  const at = (scenario: string, c: number): RunResult | undefined => runs.find((r) => r.scenario === scenario && r.concurrency === c);
  const maxC = Math.max(...runs.map((r) => r.concurrency));
  const out: TargetCheck[] = [];
  const w = at("ledger-write", maxC);
  out.push({
    target: `ledger-write req/s ≥ 0.8× baseline at c=${maxC}`,
    measured: w?.vsBaseline ? `${fmtRatio(w.vsBaseline, "throughput")}×` : "–",
    met: w?.vsBaseline ? w.vsBaseline.throughput >= 0.8 : undefined,
  });
  out.push({
    target: `ledger-write p99 ≤ 1.5× baseline at c=${maxC}`,
    measured: w?.vsBaseline ? `${fmtRatio(w.vsBaseline, "p99")}×` : "–",
    met: w?.vsBaseline ? w.vsBaseline.p99 <= 1.5 : undefined,
  });
  const d = at("ledger-duplicate", maxC);
  out.push({
    target: `ledger-duplicate req/s ≥ ledger-write req/s (c=${maxC})`,
    measured: d && w ? `${fmt(d.throughput / w.throughput, 2)}× ledger-write` : "–",
    met: d && w ? d.throughput >= w.throughput : undefined,
  });
  const x = at("ledger-denied", maxC);
  out.push({
    target: `ledger-denied req/s ≥ 0.8× baseline (c=${maxC})`,
    measured: x?.vsBaseline ? `${fmtRatio(x.vsBaseline, "throughput")}×` : "–",
    met: x?.vsBaseline ? x.vsBaseline.throughput >= 0.8 : undefined,
  });
  const call = at(CALL, maxC);
  if (call) {
    out.push({ target: `whole call ≥ 1,000 calls/s at c=${maxC} (issue 11)`, measured: `${fmtInt(call.throughput)}/s`, met: call.throughput >= 1000 });
  }
  // Issue 34's three: for the call as the client makes it now (`call`, after) and as an older
  // client makes it (`call-3hop`, before), from the same repetitions.
  for (const [name, shape] of [
    [CALL, "whole call"],
    [CALL_3HOP, "before: call-3hop (older client, 3 hops)"],
  ] as const) {
    const r = at(name, maxC);
    if (r?.vsPeer) {
      out.push({
        target: `${shape} ≥ 0.7× the gRPC peer at c=${maxC} (issues 11, 34)`,
        measured: `${fmtRatio(r.vsPeer, "throughput")}×`,
        met: r.vsPeer.throughput >= 0.7,
      });
    }
    if (r?.vsInproc) {
      out.push({
        target: `${shape} ≥ 0.3× the in-process peer at c=${maxC} (issue 34)`,
        measured: `${fmtRatio(r.vsInproc, "throughput")}×`,
        met: r.vsInproc.throughput >= 0.3,
      });
    }
    const r16 = at(name, 16);
    if (r16) {
      out.push({
        target: `${shape} p99 ≤ 50 ms at c=16 (issues 11, 34)`,
        measured: `${fmt(r16.latencyMs.p99, 1)} ms${repetitionP99s(repetitions, name, 16)}`,
        met: r16.latencyMs.p99 <= 50,
      });
    }
  }
  const rtCall = roundTrips?.operations.find((o) => o.operation === CALL_OPERATION);
  const rtLoad = roundTrips?.operations.find((o) => o.operation === CALL_AT_LOAD_OPERATION);
  if (rtLoad) {
    const commands = (rtLoad.roundTrips["kernel"]?.total ?? 0) + (rtLoad.roundTrips["ledger"]?.total ?? 0);
    out.push({
      target: `≤ 2.2 database commands per whole Idempotent call at load (${CALL_AT_LOAD_LANES} in flight), kernel + ledger (round-trip pass; issue 34)`,
      measured: `${fmt(commands, 2)}`,
      met: commands <= 2.2,
    });
  }
  if (rtCall) {
    if (rtCall.hops)
      out.push({ target: "≤ 2 RPC hops per whole call (round-trip pass; issue 34)", measured: `${fmt(rtCall.hops.total, 2)}`, met: rtCall.hops.total <= 2 });
  }
  const kernelCpu = call?.services["kernel"]?.cpuMicrosPerRequest;
  if (call && kernelCpu !== undefined) {
    out.push({ target: `kernel CPU ≤ 0.4 ms per whole call at c=${maxC} (issue 11)`, measured: `${fmtInt(kernelCpu)} µs`, met: kernelCpu <= 400 });
  }
  const k = micro.find((m) => m.name === "key derivation (10 fields)");
  out.push({
    target: "key derivation > 100,000/s on one core (10 fields)",
    measured: k ? `${fmtInt(k.opsPerSecond)}/s best, ${fmtInt(k.medianOpsPerSecond)}/s median` : "–",
    met: k ? k.opsPerSecond > 100_000 : undefined,
  });
  if (soak) {
    const growth = soak.rssMiB.ledgerEnd - soak.rssMiB.ledgerStart;
    const kernelGrowth = soak.rssMiB.kernelEnd - soak.rssMiB.kernelStart;
    out.push({
      target: `memory flat over the ${soak.scenario ?? "ledger-write"} soak (ledger and kernel RSS growth < 10%)`,
      measured: `ledger ${fmt(growth, 1)} MiB, kernel ${fmt(kernelGrowth, 1)} MiB`,
      met: growth < 0.1 * soak.rssMiB.ledgerStart && kernelGrowth < 0.1 * soak.rssMiB.kernelStart,
    });
  } else {
    out.push({ target: "memory flat over a 5-minute soak at c=64", measured: "not run (--soak)", met: undefined });
  }
  return out;
}

const COLORS = ["#9ecae1", "#4292c6", "#08519c", "#6baed6", "#2171b5"];

function niceMax(v: number): number {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

const esc = (s: string): string => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

/** A grouped bar chart: one group per scenario, one bar per concurrency. */
function panel(runs: RunResult[], title: string, value: (r: RunResult) => number, unit: string, y0: number, width: number): string {
  const scenarios = [...new Set(runs.map((r) => r.scenario))];
  const cs = [...new Set(runs.map((r) => r.concurrency))].sort((a, b) => a - b);
  const h = 260;
  const left = 70;
  const top = y0 + 30;
  const plotW = width - left - 20;
  const max = niceMax(Math.max(...runs.map(value).filter(Number.isFinite), 0));
  const parts: string[] = [];
  parts.push(`<text x="${left}" y="${y0 + 18}" font-size="14" font-weight="bold">${esc(title)}</text>`);
  for (let t = 0; t <= 4; t++) {
    const v = (max * t) / 4;
    const y = top + h - (h * t) / 4;
    parts.push(`<line x1="${left}" y1="${y}" x2="${left + plotW}" y2="${y}" stroke="#ddd"/>`);
    parts.push(`<text x="${left - 6}" y="${y + 4}" font-size="11" text-anchor="end">${v >= 100 ? Math.round(v) : +v.toFixed(2)}</text>`);
  }
  parts.push(`<text x="14" y="${top + h / 2}" font-size="11" transform="rotate(-90 14 ${top + h / 2})" text-anchor="middle">${esc(unit)}</text>`);
  const groupW = plotW / scenarios.length;
  const barW = Math.min(36, (groupW - 16) / cs.length);
  scenarios.forEach((s, gi) => {
    const gx = left + gi * groupW + (groupW - barW * cs.length) / 2;
    cs.forEach((c, ci) => {
      const r = runs.find((x) => x.scenario === s && x.concurrency === c);
      const v = r ? value(r) : Number.NaN;
      if (!Number.isFinite(v)) return;
      const bh = (h * v) / max;
      const x = gx + ci * barW;
      parts.push(
        `<rect x="${x.toFixed(1)}" y="${(top + h - bh).toFixed(1)}" width="${(barW - 2).toFixed(1)}" height="${bh.toFixed(1)}" fill="${COLORS[ci % COLORS.length]}"><title>${esc(`${s} c=${c}: ${v.toFixed(2)} ${unit}`)}</title></rect>`,
      );
      parts.push(
        `<text x="${(x + barW / 2 - 1).toFixed(1)}" y="${(top + h - bh - 3).toFixed(1)}" font-size="9" text-anchor="middle">${v >= 100 ? Math.round(v) : v.toFixed(1)}</text>`,
      );
    });
    parts.push(`<text x="${(left + gi * groupW + groupW / 2).toFixed(1)}" y="${top + h + 16}" font-size="11" text-anchor="middle">${esc(s)}</text>`);
  });
  return parts.join("\n");
}

/** The SVG chart: throughput (top) and p99 latency (bottom) per scenario and concurrency. */
export function svgChart(rec: BenchRecord): string {
  const width = 960;
  const cs = [...new Set(rec.runs.map((r) => r.concurrency))].sort((a, b) => a - b);
  const legend = cs
    .map(
      (c, i) =>
        `<rect x="${width - 300 + i * 90}" y="8" width="12" height="12" fill="${COLORS[i % COLORS.length]}"/><text x="${width - 284 + i * 90}" y="18" font-size="11">c = ${c}</text>`,
    )
    .join("");
  const height = 700;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="10" y="18" font-size="12">keycap bench ${esc(rec.timestamp)} (${rec.mode}) — ${esc(rec.machine.cpuModel)}, ${rec.machine.cores} cores — MongoDB: ${esc(rec.versions.mongoBackend)}</text>`,
    legend,
    panel(rec.runs, "Throughput (answers/s; higher is better)", (r) => r.throughput, "req/s", 30, width),
    panel(rec.runs, "p99 latency (lower is better)", (r) => r.latencyMs.p99, "ms", 360, width),
    `</svg>`,
  ].join("\n");
}
