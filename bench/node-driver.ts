/**
 * The project's own load driver, for what ghz cannot express (a sequence of calls to two
 * services per operation: BeginCall → Write → CompleteCall). Closed loop: `concurrency`
 * workers each start the next operation as soon as the previous one ends, until the
 * deadline; every operation's latency is kept.
 */
import { KeycapClientError } from "../clients/ts/src/errors";

/** What a closed-loop run measured (same shape as a ghz chunk's result). */
export interface LoopResult {
  seconds: number;
  latenciesMs: number[];
  /** OK or the gRPC status name of the failure (PERMISSION_DENIED, ...). */
  statuses: Record<string, number>;
  errorSamples: string[];
}

/**
 * Runs `op(i)` (i = 0, 1, 2, ... across workers) with `concurrency` in flight for
 * `seconds`.
 */
export async function runClosedLoop(concurrency: number, seconds: number, op: (i: number) => Promise<unknown>): Promise<LoopResult> {
  const latenciesMs: number[] = [];
  const statuses: Record<string, number> = {};
  const errorSamples = new Set<string>();
  let next = 0;
  const start = performance.now();
  const deadline = start + seconds * 1000;
  const worker = async (): Promise<void> => {
    while (performance.now() < deadline) {
      const i = next++;
      const t0 = performance.now();
      let st = "OK";
      try {
        await op(i);
      } catch (err) {
        const e = KeycapClientError.from(err);
        st = e.codeName;
        if (errorSamples.size < 3) errorSamples.add(`${st}/${e.reason}: ${e.message.slice(0, 200)}`);
      }
      latenciesMs.push(performance.now() - t0);
      statuses[st] = (statuses[st] ?? 0) + 1;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return { seconds: (performance.now() - start) / 1000, latenciesMs, statuses, errorSamples: [...errorSamples] };
}
