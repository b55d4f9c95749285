/**
 * The Prometheus metrics of one keycap process (ADR 0017). One registry per process, served
 * on KEYCAP_METRICS_LISTEN; every series that belongs to a service carries a `service`
 * label ("kernel", "ledger", "admin"), so `keycap serve all` and split services give the same
 * series. Hot-path recorders are bound once (per method, per code) and reused: recording a
 * call is a few additions, never a new label object.
 */
import { status } from "@grpc/grpc-js";
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry, type LabelValues } from "prom-client";
import { OTHER_LABEL, TopLabels } from "./top-labels";

/** Metric names, one place: the Grafana dashboard (docs/grafana-dashboard.json) is built from these. */
export const METRIC = {
  rpcs: "keycap_rpcs_total",
  rpcDuration: "keycap_rpc_duration_seconds",
  refusals: "keycap_refusals_total",
  writes: "keycap_ledger_writes_total",
  verifications: "keycap_capability_verifications_total",
  verificationDuration: "keycap_capability_verification_duration_seconds",
  mongoDuration: "keycap_mongodb_command_duration_seconds",
  pendingCalls: "keycap_calls_pending",
  indeterminateCalls: "keycap_calls_indeterminate",
  retentionSwept: "keycap_retention_swept_total",
  completionReceipts: "keycap_completion_receipts_total",
} as const;

/** How a ledger write ended (DESIGN §4). */
export type WriteOutcome = "new" | "duplicate" | "payload_mismatch";

/** Observes one RPC of one method: its status code and how long it took. */
export interface RpcRecorder {
  observe(code: number, seconds: number): void;
}

/** What the kernel's journal reports when scraped. */
export interface CallCounts {
  pending: number;
  indeterminate: number;
}

export interface MetricsOptions {
  /** Tool ids that keep their own label; the rest are `other` (KEYCAP_METRICS_TOOL_LABELS). */
  toolLabels: number;
  /** Node and process metrics (CPU, memory, event loop, GC). Default true. */
  processMetrics?: boolean;
}

// Sub-millisecond to seconds: a whole call is a few ms here, a verification ~100 µs.
const LATENCY_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

const CODE_NAMES: readonly string[] = (() => {
  const names: string[] = [];
  for (const [name, value] of Object.entries(status)) if (typeof value === "number") names[value] = name;
  return names;
})();

type Labels<T extends string> = LabelValues<T>;

export class Metrics {
  readonly registry = new Registry();
  private readonly rpcs: Counter<"service" | "method" | "code">;
  private readonly rpcDuration: Histogram<"service" | "method" | "code">;
  private readonly refusals: Counter<"service" | "reason" | "tool">;
  private readonly writes: Counter<"tool" | "outcome">;
  private readonly verifications: Counter<"outcome">;
  private readonly verificationDuration: Histogram<"outcome">;
  private readonly mongoDuration: Histogram<"service" | "command" | "outcome">;
  private readonly swept: Counter<"service" | "task">;
  private readonly receipts: Counter<"result">;
  private readonly refusalTools: TopLabels;
  private readonly writeTools: TopLabels;
  private readonly refusalChildren = new Map<string, { tool: string; labels: Labels<"service" | "reason" | "tool">; inc: () => void }>();
  private readonly writeChildren = new Map<string, { tool: string; labels: Labels<"tool" | "outcome">; inc: () => void }>();
  private readonly verified: { inc: () => void; observe: (s: number) => void };
  private readonly refused: { inc: () => void; observe: (s: number) => void };
  private readonly mongoChildren = new Map<string, { observe: (s: number) => void }>();

  constructor(opts: MetricsOptions) {
    const registers = [this.registry];
    this.rpcs = new Counter({
      name: METRIC.rpcs,
      help: "RPCs answered, by service, method and gRPC status code",
      labelNames: ["service", "method", "code"],
      registers,
    });
    this.rpcDuration = new Histogram({
      name: METRIC.rpcDuration,
      help: "Time from receiving an RPC to answering it (s), by service, method and code",
      labelNames: ["service", "method", "code"],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.refusals = new Counter({
      name: METRIC.refusals,
      help: `Refused calls, by service, reason and tool id (the most frequent tool ids; the rest are "${OTHER_LABEL}")`,
      labelNames: ["service", "reason", "tool"],
      registers,
    });
    this.writes = new Counter({
      name: METRIC.writes,
      help: "Accepted ledger writes, by tool id and outcome: new effect, duplicate, duplicate with a different payload",
      labelNames: ["tool", "outcome"],
      registers,
    });
    this.verifications = new Counter({
      name: METRIC.verifications,
      help: "Capability verifications, by outcome (verified, refused)",
      labelNames: ["outcome"],
      registers,
    });
    this.verificationDuration = new Histogram({
      name: METRIC.verificationDuration,
      help: "Time to verify a capability (s), by outcome",
      labelNames: ["outcome"],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.mongoDuration = new Histogram({
      name: METRIC.mongoDuration,
      help: "MongoDB command round trips (s) as the driver reports them, by service, command and outcome (ok, error)",
      labelNames: ["service", "command", "outcome"],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.swept = new Counter({
      name: METRIC.retentionSwept,
      help: "Records removed by the retention sweeper (docs/retention.md), by service and task",
      labelNames: ["service", "task"],
      registers,
    });
    this.receipts = new Counter({
      name: METRIC.completionReceipts,
      help: "Completion receipts clients forwarded to the kernel (ADR 0035), by result: settles (the call is settled without reading its entry), unknown (not open on this replica), invalid (does not verify; ignored)",
      labelNames: ["result"],
      registers,
    });
    this.refusalTools = new TopLabels(opts.toolLabels, (tool) => this.forget(this.refusalChildren, tool, (l) => this.refusals.remove(l)));
    this.writeTools = new TopLabels(opts.toolLabels, (tool) => this.forget(this.writeChildren, tool, (l) => this.writes.remove(l)));
    this.verified = this.verificationOutcome("verified");
    this.refused = this.verificationOutcome("refused");
    if (opts.processMetrics ?? true) collectDefaultMetrics({ register: this.registry });
  }

  /** A recorder for one method of one service, bound to its label values once per status code. */
  rpc(service: string, method: string): RpcRecorder {
    const byCode: ({ inc: () => void; observe: (s: number) => void } | undefined)[] = [];
    return {
      observe: (code, seconds) => {
        let child = byCode[code];
        if (!child) {
          const labels = { service, method, code: CODE_NAMES[code] ?? String(code) };
          const count = this.rpcs.labels(labels);
          const duration = this.rpcDuration.labels(labels);
          child = { inc: () => count.inc(), observe: (s) => duration.observe(s) };
          byCode[code] = child;
        }
        child.inc();
        child.observe(seconds);
      },
    };
  }

  /** One refusal, as the refusal audit records it. */
  refusal(service: string, reason: string, toolId: string): void {
    // No tool id (no capability at all): its own empty label, not a slot among the tools.
    const tool = toolId === "" ? "" : this.refusalTools.label(toolId);
    const key = `${service}\u0000${reason}\u0000${tool}`;
    let child = this.refusalChildren.get(key);
    if (!child) {
      const labels = { service, reason, tool };
      const c = this.refusals.labels(labels);
      child = { tool, labels, inc: () => c.inc() };
      this.refusalChildren.set(key, child);
    }
    child.inc();
  }

  /** One accepted ledger write. */
  write(toolId: string, outcome: WriteOutcome): void {
    const tool = this.writeTools.label(toolId);
    const key = `${tool}\u0000${outcome}`;
    let child = this.writeChildren.get(key);
    if (!child) {
      const labels = { tool, outcome };
      const c = this.writes.labels(labels);
      child = { tool, labels, inc: () => c.inc() };
      this.writeChildren.set(key, child);
    }
    child.inc();
  }

  /** One capability verification and how long it took. */
  verification(ok: boolean, seconds: number): void {
    const o = ok ? this.verified : this.refused;
    o.inc();
    o.observe(seconds);
  }

  /** A MongoDB driver command observer for one service (connectMongo's `onCommand`). */
  mongoObserver(service: string): (command: string, ok: boolean, seconds: number) => void {
    return (command, ok, seconds) => {
      const key = `${service}\u0000${command}\u0000${ok ? "ok" : "error"}`;
      let child = this.mongoChildren.get(key);
      if (!child) {
        const h = this.mongoDuration.labels({ service, command, outcome: ok ? "ok" : "error" });
        child = { observe: (s) => h.observe(s) };
        this.mongoChildren.set(key, child);
      }
      child.observe(seconds);
    };
  }

  /** Forwarded completion receipts, by what became of them. */
  completionReceipts(result: "settles" | "unknown" | "invalid", n: number): void {
    if (n > 0) this.receipts.labels({ result }).inc(n);
  }

  /** Records the retention sweeper removed (a handful of tasks: the labels stay few). */
  retentionSwept(service: string, task: string, n: number): void {
    this.swept.labels({ service, task }).inc(n);
  }

  /**
   * Pending and indeterminate calls, read from the journal when scraped (never on a call's
   * path). A failed read leaves the gauges at their last value: a scrape must not fail
   * because the database hiccuped.
   */
  callGauges(read: () => Promise<CallCounts>): void {
    let last: CallCounts = { pending: 0, indeterminate: 0 };
    let inFlight: Promise<CallCounts> | undefined;
    // Both gauges are collected by the same scrape: one read serves both.
    const counts = (): Promise<CallCounts> => {
      inFlight ??= read()
        .then((c) => (last = c))
        .catch(() => last)
        .finally(() => setImmediate(() => (inFlight = undefined)));
      return inFlight;
    };
    const registers = [this.registry];
    new Gauge({
      name: METRIC.pendingCalls,
      help: "Calls begun and not completed (what a crash would leave to recover), read from the journal at scrape time",
      registers,
      async collect() {
        this.set((await counts()).pending);
      },
    });
    new Gauge({
      name: METRIC.indeterminateCalls,
      help: "Calls recovery marked indeterminate (Unsafe, whether it happened is unknown) and no operator has completed",
      registers,
      async collect() {
        this.set((await counts()).indeterminate);
      },
    });
  }

  private verificationOutcome(outcome: "verified" | "refused"): { inc: () => void; observe: (s: number) => void } {
    const c = this.verifications.labels({ outcome });
    const h = this.verificationDuration.labels({ outcome });
    return { inc: () => c.inc(), observe: (s) => h.observe(s) };
  }

  private forget<L>(children: Map<string, { tool: string; labels: L }>, tool: string, remove: (labels: L) => void): void {
    for (const [key, child] of children) {
      if (child.tool !== tool) continue;
      remove(child.labels);
      children.delete(key);
    }
  }
}
