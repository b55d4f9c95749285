/**
 * Retention of stored results (DESIGN §13, ADR 0031): FerretDB has no TTL indexes, so the
 * gateway sweeps `mcp_results` itself, in bounded batches, one replica at a time (the lease of
 * common/src/retention-sweeper.ts), deleting results recorded more than
 * KEYCAP_MCP_RESULT_TTL_SECONDS ago. After that, a call with the same key is sent again: a new
 * effect. Slots in flight, retryable or indeterminate are never deleted.
 */
import type { Db } from "mongodb";
import type { KeycapConfig } from "../../common/src/config";
import type { Logger } from "../../common/src/logger";
import type { Metrics } from "../../common/src/metrics";
import { cutoff, RetentionSweeper } from "../../common/src/retention-sweeper";
import type { ResultStore } from "./result-store";

/**
 * Starts the sweeper; the returned function stops it. A TTL of 0 keeps results forever. It sweeps
 * every KEYCAP_RETENTION_SWEEP_INTERVAL_MS, or every tenth of the TTL when that is shorter.
 */
export async function startRetention(
  db: Db,
  store: ResultStore,
  ttlSeconds: number,
  config: KeycapConfig,
  logger: Logger,
  metrics?: Metrics,
): Promise<() => Promise<void>> {
  const { sweepIntervalMs, batch } = config.retention;
  if (ttlSeconds === 0 || sweepIntervalMs === 0) return async () => undefined;
  const intervalMs = Math.max(100, Math.min(sweepIntervalMs, (ttlSeconds * 1000) / 10));
  const task = { name: "mcp_results", sweep: (limit: number) => store.expire(cutoff(ttlSeconds) as Date, limit) };
  const sweeper = (await RetentionSweeper.open(db, [task], { intervalMs, batch, service: "mcp", logger, metrics })).start();
  return () => sweeper.stop();
}
