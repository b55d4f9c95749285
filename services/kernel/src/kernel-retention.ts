/**
 * The kernel's share of the retention policy (docs/retention.md, ADR 0031): completed calls
 * with their completions, idle replay runs' positions, and refusal records (shared with the
 * ledger: whichever holds the `rejections` lease sweeps them).
 */
import type { Db } from "mongodb";
import type { KeycapConfig } from "../../common/src/config";
import type { Logger } from "../../common/src/logger";
import type { Metrics } from "../../common/src/metrics";
import type { RejectionAudit } from "../../common/src/rejection-audit";
import { cutoff, RetentionSweeper, type RetentionTask } from "../../common/src/retention-sweeper";
import type { CallJournal } from "./call-journal";
import type { ReplayPositions } from "./replay-positions";

export interface KernelRetentionParts {
  journal: CallJournal;
  positions: ReplayPositions;
  audit: RejectionAudit;
}

/** The kernel's retention tasks; a kind kept forever (0) has none. */
export function kernelRetentionTasks(retention: KeycapConfig["retention"], parts: KernelRetentionParts): RetentionTask[] {
  const tasks: RetentionTask[] = [];
  const { journal, positions, audit } = parts;
  if (retention.callsSeconds > 0) {
    const before = (): Date => cutoff(retention.callsSeconds) as Date;
    tasks.push({ name: "completed_calls", sweep: (limit) => journal.expireCompleted(before(), limit) });
    tasks.push({ name: "replay_positions", sweep: (limit) => positions.expireIdleRuns(before(), limit, (ids) => journal.pendingAmong(ids)) });
  }
  if (retention.refusalsSeconds > 0) tasks.push(audit.retentionTask(retention.refusalsSeconds));
  return tasks;
}

/** Starts the kernel's sweeper. */
export async function startKernelRetention(
  db: Db,
  config: KeycapConfig,
  parts: KernelRetentionParts,
  logger: Logger,
  metrics?: Metrics,
): Promise<RetentionSweeper> {
  const { retention } = config;
  const tasks = kernelRetentionTasks(retention, parts);
  const sweeper = await RetentionSweeper.open(db, tasks, { intervalMs: retention.sweepIntervalMs, batch: retention.batch, service: "kernel", logger, metrics });
  return sweeper.start();
}
