/**
 * The ratios a run reports (bench/README.md): each scenario to the baseline, keycap's whole
 * call (`call`, and `call-3hop` as an older client makes it) to the gRPC peer and to the
 * in-process peer, call-2x2, call-unary and call-3hop to `call`. Taken
 * within one repetition (scenarios measured together, bench/repetitions.ts); a pooled row
 * gets the median of its repetitions' ratios with their range.
 */
import type { Ratio, RunResult } from "./report";
import { spreadOf } from "./repetitions";
import { BASELINE, BASELINE_AFTER, CALL, CALL_2X2, CALL_3HOP, CALL_UNARY, PEER, PEER_INPROC } from "./scenarios";

const ratio = (r: RunResult, to: RunResult): Ratio => ({ throughput: r.throughput / to.throughput, p99: r.latencyMs.p99 / to.latencyMs.p99 });

/** Ratios within one set of runs measured together: to the baseline (mean of before and after), the two peers, one `call`. */
export function attachRatios(runs: RunResult[]): void {
  for (const r of runs) {
    const bases = runs.filter((b) => (b.scenario === BASELINE || b.scenario === BASELINE_AFTER) && b.concurrency === r.concurrency);
    if (bases.length === 0) continue;
    const throughput = bases.reduce((n, b) => n + b.throughput, 0) / bases.length;
    const p99 = bases.reduce((n, b) => n + b.latencyMs.p99, 0) / bases.length;
    r.vsBaseline = { throughput: r.throughput / throughput, p99: r.latencyMs.p99 / p99 };
  }
  for (const r of runs) {
    const at = (name: string): RunResult | undefined => runs.find((x) => x.scenario === name && x.concurrency === r.concurrency);
    const wholeCall = r.scenario === CALL || r.scenario === CALL_3HOP || r.scenario === CALL_2X2;
    const peer = at(PEER);
    if (peer && wholeCall) r.vsPeer = ratio(r, peer);
    const inproc = at(PEER_INPROC);
    if (inproc && wholeCall) r.vsInproc = ratio(r, inproc);
    const single = at(CALL);
    if (single && (r.scenario === CALL_2X2 || r.scenario === CALL_UNARY || r.scenario === CALL_3HOP)) r.vsCall = ratio(r, single);
  }
}

/** A pooled row's ratios: the median of its repetitions' ratios, with their range. */
export function attachSpreads(runs: RunResult[], repetitions: RunResult[]): void {
  const across = (ratios: (Ratio | undefined)[]): Ratio | undefined => {
    const present = ratios.filter((x): x is Ratio => x !== undefined);
    const throughput = spreadOf(present.map((x) => x.throughput));
    const p99 = spreadOf(present.map((x) => x.p99));
    return throughput && p99 ? { throughput: throughput.median, p99: p99.median, spread: { throughput, p99 } } : undefined;
  };
  for (const r of runs) {
    const mine = repetitions.filter((x) => x.scenario === r.scenario && x.concurrency === r.concurrency);
    for (const k of ["vsBaseline", "vsPeer", "vsInproc", "vsCall"] as const) {
      const pooled = across(mine.map((x) => x[k]));
      if (pooled) r[k] = pooled;
    }
  }
}
