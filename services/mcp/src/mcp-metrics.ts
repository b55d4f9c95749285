/**
 * The MCP gateway's Prometheus series (ADR 0017's registry, served on KEYCAP_METRICS_LISTEN):
 * every host tools/call by tool and how it ended, and how long it took. The tool label is the
 * kernel tool id, so its values are bounded by the policy's tools.
 */
import { Counter, Histogram } from "prom-client";
import type { Metrics } from "../../common/src/metrics";

/** How one tools/call ended, as the host saw it. */
export type CallOutcome =
  /** Sent upstream; its result stored (and answered). */
  | "sent"
  /** The stored result of an earlier call with the same key. */
  | "replayed"
  /** A `read` tool's call, passed through. */
  | "passed_through"
  /** Refused before anything was sent (the kernel's reason). */
  | "refused"
  /** Not sent: an identical Unsafe call is in flight or indeterminate. */
  | "not_sent"
  /** No result from the upstream (timeout, closed connection, JSON-RPC error): the key stays retryable. */
  | "unavailable";

export const MCP_METRIC = {
  calls: "keycap_mcp_calls_total",
  duration: "keycap_mcp_call_duration_seconds",
} as const;

/** Records each call's outcome and duration. */
export interface CallRecorder {
  record(toolId: string, outcome: CallOutcome, seconds: number): void;
}

/** The gateway's series on the process's registry. */
export function mcpCallRecorder(metrics: Metrics): CallRecorder {
  const registers = [metrics.registry];
  const calls = new Counter({
    name: MCP_METRIC.calls,
    help: "MCP tools/call answered by the gateway, by tool and outcome",
    labelNames: ["tool", "outcome"],
    registers,
  });
  const duration = new Histogram({
    name: MCP_METRIC.duration,
    help: "Time from a host's tools/call to the gateway's answer (s), by outcome",
    labelNames: ["outcome"],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers,
  });
  return {
    record: (tool, outcome, seconds) => {
      calls.labels({ tool, outcome }).inc();
      duration.labels({ outcome }).observe(seconds);
    },
  };
}

/** Records nothing (no KEYCAP_METRICS_LISTEN). */
export const NO_RECORDER: CallRecorder = { record: () => undefined };
