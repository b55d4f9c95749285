/**
 * Calls this kernel replica began (or resumed) and nobody has completed here yet, so
 * CompleteCall can skip the read that proves the call exists: on the whole call's path
 * that read was one of five database round trips. Bounded by count and by the bytes of
 * the recorded arguments; the oldest go first, and a miss only costs the read.
 *
 * What it may hold stale: the attempt and capability of a call another replica resumed
 * since. Those only shape CompleteCall's answer, never its decision (the completion's
 * unique insert decides, and the tool id, which access is checked on, never changes).
 */
import type { CallRecord } from "./call-record";

export interface BegunCallsLimits {
  maxCalls: number;
  maxArgumentBytes: number;
}

export class BegunCalls {
  private readonly calls = new Map<string, CallRecord>();
  private bytes = 0;

  constructor(private readonly limits: BegunCallsLimits) {}

  remember(call: CallRecord): void {
    this.forget(call._id);
    const size = call.arguments_json.length;
    if (size > this.limits.maxArgumentBytes) return;
    this.calls.set(call._id, call);
    this.bytes += size;
    for (const [id, c] of this.calls) {
      if (this.calls.size <= this.limits.maxCalls && this.bytes <= this.limits.maxArgumentBytes) break;
      this.calls.delete(id);
      this.bytes -= c.arguments_json.length;
    }
  }

  get(callId: string): CallRecord | undefined {
    return this.calls.get(callId);
  }

  forget(callId: string): void {
    const c = this.calls.get(callId);
    if (!c) return;
    this.calls.delete(callId);
    this.bytes -= c.arguments_json.length;
  }

  get size(): number {
    return this.calls.size;
  }
}
