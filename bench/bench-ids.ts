/**
 * Ids the bench writes under. The baseline's tool id is as long as the enforced writes'
 * and both record the same principal, so the two entry documents have the same size
 * (bench/round-trips.ts checks it); baseline entries are never mistaken for a tool's.
 */
export const BASELINE_TOOL_ID = "bench.baseline";
export const BENCH_WRITE_TOOL_ID = "bench.enforced";
export const BENCH_PRINCIPAL = "bench-runtime";
