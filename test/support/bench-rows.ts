import type { RunResult } from "../../bench/report";

/** A measured bench row with only what the ratios, the targets and the report read. */
export function benchRow(scenario: string, concurrency: number, throughput: number, p99: number, rep?: number): RunResult {
  return {
    scenario,
    driver: "node",
    concurrency,
    ...(rep !== undefined ? { rep } : {}),
    seconds: 1,
    requests: throughput,
    expected: throughput,
    errors: 0,
    statuses: { OK: throughput },
    errorSamples: [],
    throughput,
    latencyMs: { mean: p99 / 2, p50: p99 / 3, p90: p99 / 2, p99, max: p99 },
    services: {},
    invocations: 0,
  };
}
