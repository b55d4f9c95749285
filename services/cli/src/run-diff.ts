/**
 * `keycap runs diff <run-a> <run-b>`'s lining up (issue 30, docs/run-modes.md): the calls of a
 * replay or shadow run (b) beside those of the recorded or live run (a), each pair marked.
 *
 * - A replay of run a is lined up by the recorded call each replay call matched
 *   (`replay_of_call_id`): exact, whatever the replay's own positions are.
 * - Otherwise (a shadow run, or any two runs) in order of position. An Unsafe call of a with no
 *   call of the same tool at that point of a sandbox run b was denied there (Unsafe is denied
 *   outright in shadow and replay runs, and a denied call is not journaled), so it takes no
 *   call of b and the calls after it still line up.
 *
 * Marks: `match` (same tool, and the same key, request id or arguments), `diverged` (another
 * tool or other arguments), `denied-unsafe`, `missing` (a call of a with none in b), `extra`
 * (a call of b with none in a).
 */
import canonicalize from "canonicalize";

/** One call of a run, as the diff reads it. */
export interface DiffCall {
  position: number;
  callId: string;
  toolId: string;
  key: string;
  requestId: string;
  argumentsJson: string;
  unsafe: boolean;
  outcome: string;
  mode: "live" | "shadow" | "replay";
  /** Replay: the run replayed and the call of it matched. */
  replayOfRunId: string;
  replayOfCallId: string;
}

export type DiffMark = "match" | "diverged" | "denied-unsafe" | "missing" | "extra";

/** One line of the diff, also its --json shape. */
export interface DiffRow {
  mark: DiffMark;
  a?: DiffCall;
  b?: DiffCall;
}

/** Lines up run b's calls with run a's (each list in position order). */
export function diffRuns(runA: string, a: readonly DiffCall[], b: readonly DiffCall[]): DiffRow[] {
  const replay = b.length > 0 && b.every((c) => c.mode === "replay" && c.replayOfRunId === runA);
  return replay
    ? byRecordedCall(a, b)
    : inOrder(
        a,
        b,
        b.some((c) => c.mode !== "live"),
      );
}

function byRecordedCall(a: readonly DiffCall[], b: readonly DiffCall[]): DiffRow[] {
  const partner = new Map(b.map((c) => [c.replayOfCallId, c]));
  const rows: DiffRow[] = a.map((ca) => {
    const cb = partner.get(ca.callId);
    if (cb) return { mark: same(ca, cb) ? "match" : "diverged", a: ca, b: cb };
    return { mark: ca.unsafe ? "denied-unsafe" : "missing", a: ca };
  });
  const recorded = new Set(a.map((c) => c.callId));
  for (const cb of b) if (!recorded.has(cb.replayOfCallId)) rows.push({ mark: "extra", b: cb });
  return rows;
}

function inOrder(a: readonly DiffCall[], b: readonly DiffCall[], sandbox: boolean): DiffRow[] {
  const rows: DiffRow[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    const ca = a[i];
    const cb = b[j];
    if (ca && sandbox && ca.unsafe && cb?.toolId !== ca.toolId) {
      rows.push({ mark: "denied-unsafe", a: ca });
      i++;
    } else if (ca && cb) {
      rows.push({ mark: same(ca, cb) ? "match" : "diverged", a: ca, b: cb });
      i++;
      j++;
    } else if (ca) {
      rows.push({ mark: "missing", a: ca });
      i++;
    } else {
      rows.push({ mark: "extra", b: cb! });
      j++;
    }
  }
  return rows;
}

/** Same tool, and the same key or request id, else the same arguments (a shadow run's keys may name its own run). */
function same(a: DiffCall, b: DiffCall): boolean {
  if (a.toolId !== b.toolId) return false;
  if ((a.key !== "" && a.key === b.key) || (a.requestId !== "" && a.requestId === b.requestId)) return true;
  return canonical(a.argumentsJson) === canonical(b.argumentsJson);
}

function canonical(json: string): string {
  try {
    return canonicalize(JSON.parse(json)) ?? json;
  } catch {
    return json;
  }
}
