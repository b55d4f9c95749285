/**
 * Retention of stored results (DESIGN §13): FerretDB has no TTL indexes, so the gateway sweeps
 * `mcp_results` itself, every minute (or a tenth of the TTL, when shorter), deleting results
 * recorded more than KEYCAP_MCP_RESULT_TTL_SECONDS ago. After that, a call with the same key is
 * sent again: a new effect. Slots in flight, retryable or indeterminate are never deleted.
 */
import type { Logger } from "../../common/src/logger";
import type { ResultStore } from "./result-store";

/** Starts the sweeper; the returned function stops it. A TTL of 0 keeps results forever. */
export function startRetention(store: ResultStore, ttlSeconds: number, logger: Logger): () => void {
  if (ttlSeconds === 0) return () => undefined;
  const everyMs = Math.max(200, Math.min(60_000, (ttlSeconds * 1000) / 10));
  let running = false;
  const sweep = async (): Promise<void> => {
    if (running) return;
    running = true;
    try {
      const deleted = await store.expire(new Date(Date.now() - ttlSeconds * 1000));
      if (deleted > 0) logger.info({ deleted, ttlSeconds }, "mcp: stored results expired");
    } catch (err) {
      logger.warn({ err: err instanceof Error ? err.message : String(err) }, "mcp: expiring stored results failed; next sweep retries");
    } finally {
      running = false;
    }
  };
  const timer = setInterval(() => void sweep(), everyMs);
  timer.unref();
  return () => clearInterval(timer);
}
