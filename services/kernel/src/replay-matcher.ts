/**
 * Replay (ADR 0028): a replay call is matched to the recorded run's call at the call's
 * position in its replay run, by tool and by key (Idempotent, derived in the recorded
 * run's context) or request id (Queryable). The first call that does not match is
 * refused REPLAY_DIVERGED, naming its position and the recorded call it was expected to
 * match, and takes no position: what a person replaying a run wants to see first.
 */
import type { CallJournal, CallRecord } from "./call-journal";
import type { ReplayPositions } from "./replay-positions";
import { Reasons, refuse } from "../../common/src/refuse";

/** What is matched: the replay call as the kernel derived it. */
export interface ReplayCall {
  /** The replay run (the call's own run id) and the recorded run. */
  runId: string;
  replayOfRunId: string;
  callId: string;
  toolId: string;
  key?: string;
  requestId?: string;
}

/** A matched call: its position and the recorded call, with its outcome. */
export interface ReplayMatch {
  position: number;
  recorded: CallRecord;
}

/** How many taken positions one BeginCall steps over before it gives up (CONCURRENT_REPLAY). */
const MAX_STEPS = 64;

export class ReplayMatcher {
  constructor(
    private readonly journal: CallJournal,
    private readonly positions: ReplayPositions,
  ) {}

  /** Matches and takes the call's position, or refuses REPLAY_DIVERGED. */
  match(call: ReplayCall): Promise<ReplayMatch> {
    return this.take(call, (recorded, position) => {
      if (recorded && sameCall(recorded, call)) return;
      throw refuse(Reasons.REPLAY_DIVERGED, divergedMessage(call, recorded, position), {
        position: String(position),
        expected_call_id: recorded?._id ?? "none",
        expected_tool_id: recorded?.tool_id ?? "none",
        replay_of_run_id: call.replayOfRunId,
      });
    });
  }

  /**
   * An Unsafe call in a replay is refused SANDBOX_UNSAFE_DENIED whatever it matches; when the
   * recorded run called the same tool at this position, the call takes the position first,
   * so the calls after it still line up with the recorded ones.
   */
  async denyUnsafe(call: ReplayCall): Promise<Error> {
    let position: number | undefined;
    try {
      position = (
        await this.take(call, (recorded) => {
          if (recorded?.tool_id !== call.toolId) throw new NotTaken();
        })
      ).position;
    } catch (err) {
      if (!(err instanceof NotTaken)) throw err;
    }
    return refuse(Reasons.SANDBOX_UNSAFE_DENIED, `tool ${call.toolId} is Unsafe: it is denied outright in a replay run`, {
      mode: "replay",
      ...(position !== undefined ? { position: String(position) } : {}),
    });
  }

  /** The position the call holds, or the next free one whose recorded call `check` accepts. */
  private async take(call: ReplayCall, check: (recorded: CallRecord | undefined, position: number) => void): Promise<ReplayMatch> {
    const held = await this.positions.heldBy(call.runId, call.callId);
    if (held) {
      const recorded = await this.journal.get(held.recorded_call_id);
      check(recorded, held.position);
      if (recorded) return { position: held.position, recorded };
    }
    let position = await this.positions.next(call.runId);
    for (let step = 0; step < MAX_STEPS; step++, position++) {
      // The hint may be behind (a kernel killed between taking a position and moving it): a
      // taken position is stepped over before its recorded call is compared with this one.
      if (await this.positions.isTaken(call.runId, position)) continue;
      const [recorded] = await this.journal.listRun(call.replayOfRunId, position, 1);
      check(recorded, position);
      if (!recorded) continue;
      if (await this.positions.take(call.runId, position, call.callId, recorded._id)) return { position, recorded };
      // Taken: by this very call, begun twice at once (a retry racing the first), or by another.
      const mine = await this.positions.heldBy(call.runId, call.callId);
      if (mine) return { position: mine.position, recorded };
    }
    throw refuse(Reasons.CONCURRENT_REPLAY, `replay run ${call.runId}: its positions kept being taken concurrently; retry`, { position: String(position) });
  }
}

class NotTaken extends Error {}

function sameCall(recorded: CallRecord, call: ReplayCall): boolean {
  if (recorded.tool_id !== call.toolId) return false;
  if (call.key !== undefined) return recorded.key === call.key;
  if (call.requestId !== undefined) return recorded.request_id === call.requestId;
  return true;
}

function divergedMessage(call: ReplayCall, recorded: CallRecord | undefined, position: number): string {
  const at = `replay of run ${call.replayOfRunId} diverged at position ${position}`;
  if (!recorded)
    return `${at}: the recorded run has no call there (it has ${position} calls kept; retention removes a run's completed calls after KEYCAP_RETENTION_CALLS_SECONDS)`;
  if (recorded.tool_id !== call.toolId) return `${at}: the recorded run called ${recorded.tool_id} (call ${recorded._id}) there, not ${call.toolId}`;
  return `${at}: call ${recorded._id} of ${recorded.tool_id} had other arguments (another ${call.key !== undefined ? "key" : "request id"})`;
}
