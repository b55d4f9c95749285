import type { TortureReport } from "./torture";

/** Error codes a worker may see from a system that is being killed: each says "retry" or "gave up in time". */
export const EXPECTED_ERROR_CODES: readonly string[] = ["UNAVAILABLE", "ABORTED", "DEADLINE_EXCEEDED"];

/** What the acceptance forbids, one sentence per violation (empty: the run passed). */
export function violations(r: TortureReport): string[] {
  const out: string[] = [];
  if (r.duplicateEffects > 0) out.push(`${r.duplicateEffects} duplicate effects`);
  if (r.lostAcknowledgedWrites > 0) out.push(`${r.lostAcknowledgedWrites} lost acknowledged writes`);
  if (r.callsLeftPending > 0) out.push(`${r.callsLeftPending} calls left pending`);
  if (r.orphans > 0) out.push(`${r.orphans} orphaned calls`);
  if (r.unsafeRetried > 0) out.push(`${r.unsafeRetried} Unsafe calls retried`);
  if (r.keyMismatches > 0) out.push(`${r.keyMismatches} keys that do not re-derive`);
  if (r.misfiledEntries > 0) out.push(`${r.misfiledEntries} effects not under their derived key`);
  if (r.sandboxEffects > 0) out.push(`${r.sandboxEffects} live effects of shadow or replay calls`);
  if (r.sandboxUnsafeJournaled > 0) out.push(`${r.sandboxUnsafeJournaled} Unsafe calls journaled in a sandbox run`);
  if (r.lostShadowWrites > 0) out.push(`${r.lostShadowWrites} acknowledged shadow writes not in the shadow store`);
  if (r.serviceErrors > 0) out.push(`${r.serviceErrors} unexpected errors in service handlers (answered INTERNAL)`);
  if (!r.finalRecoveryClean) out.push("the final recovery did not finish clean");
  if (r.acknowledged === 0) out.push("no write was acknowledged (the run tested nothing)");
  const unexpected = Object.entries(r.workerErrors).filter(([code]) => !EXPECTED_ERROR_CODES.includes(code));
  if (unexpected.length > 0) out.push(`worker saw ${unexpected.map(([c, n]) => `${n}× ${c}`).join(", ")}`);
  return out;
}
