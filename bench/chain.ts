/**
 * The chain pass of `make bench` (issue 34 item 2): where a whole call's time goes. For each
 * whole-call scenario (`call`: BeginCall → Write; `call-3hop`: BeginCall → Write →
 * CompleteCall, as an older client makes it) at each level it runs a fixed time on the main
 * stack, scraping the kernel's and the ledger's Prometheus metrics (bench/prom.ts) before and
 * after, and reports per stage — each RPC method the services answered, each MongoDB command
 * they sent — how many there were per call, their mean server-side duration and how many
 * were in flight on average (Little's law: the stage's summed durations over the run's
 * seconds), next to the client's whole-call mean and p99. A call waits for the whole of each
 * RPC it is part of (a batch of begins answers all its calls at its end), so the stages on the
 * path add up to the server's share of the call; the rest is the client's own queueing, the
 * transport and the event loops.
 *
 * The services' MongoDB histogram is labelled by command, not collection: the kernel's
 * `insert` is the journal's (`calls`) plus its per-second writes (unsettled-second marks,
 * listing marks, the settler's completions; the completion of each call for `call-3hop`), the
 * ledger's is `entries`. The round-trip pass names the collections.
 */
import { runClosedLoop } from "./node-driver";
import { diffActivity, scrapeAll, type Activity } from "./prom";
import type { Stack } from "./stack";
import { summarise, type LatencySummary } from "./stats";

/** One stage of one scenario at one level. */
export interface ChainStage {
  service: "kernel" | "ledger";
  kind: "rpc" | "command";
  /** The RPC method (BeginCalls, Write, ...) or the MongoDB command (insert, find, ...). */
  name: string;
  /** RPCs or commands per whole call. */
  perCall: number;
  /** Mean server-side duration of one, ms. */
  meanMs: number;
  /** Mean number in flight over the run (summed durations ÷ seconds). */
  inFlight: number;
}

/** One scenario at one level. */
export interface ChainRow {
  scenario: string;
  concurrency: number;
  seconds: number;
  calls: number;
  errors: number;
  throughput: number;
  client: LatencySummary;
  stages: ChainStage[];
}

/** A scenario the pass drives: a fresh operation per run (keys of its own). */
export interface ChainScenario {
  name: string;
  newOp: () => (i: number) => Promise<unknown>;
  /** The RPC methods a call waits for, in order (their mean durations are added up as "on the path"). */
  path: readonly string[];
}

/** Runs each scenario for `seconds` at each level, scraping the services' metrics around each run. */
export async function measureChain(
  stack: Stack,
  scenarios: readonly ChainScenario[],
  levels: readonly number[],
  seconds: number,
  log: (m: string) => void,
): Promise<ChainRow[]> {
  if (!stack.metrics) throw new Error("chain pass: the stack serves no metrics (startStack({ metrics: true }))");
  const addresses = { kernel: stack.metrics.kernel, ledger: stack.metrics.ledger };
  const rows: ChainRow[] = [];
  for (const c of levels) {
    // Interleaved: the scenarios one after the other at each level.
    for (const sc of scenarios) {
      const before = await scrapeAll(addresses);
      const r = await runClosedLoop(c, seconds, sc.newOp());
      const after = await scrapeAll(addresses);
      const calls = r.statuses["OK"] ?? 0;
      const row: ChainRow = {
        scenario: sc.name,
        concurrency: c,
        seconds: r.seconds,
        calls,
        errors: r.latenciesMs.length - calls,
        throughput: calls / r.seconds,
        client: summarise(r.latenciesMs),
        stages: stagesOf(
          { kernel: diffActivity(before["kernel"]!, after["kernel"]!), ledger: diffActivity(before["ledger"]!, after["ledger"]!) },
          calls,
          r.seconds,
        ),
      };
      rows.push(row);
      log(`chain ${sc.name} c=${c}: ${row.throughput.toFixed(0)}/s, client mean ${row.client.mean.toFixed(1)} ms, p99 ${row.client.p99.toFixed(1)} ms`);
    }
  }
  return rows;
}

function stagesOf(activity: Record<"kernel" | "ledger", Activity>, calls: number, seconds: number): ChainStage[] {
  const out: ChainStage[] = [];
  for (const service of ["kernel", "ledger"] as const) {
    for (const [kind, by] of [
      ["rpc", activity[service].rpcs],
      ["command", activity[service].commands],
    ] as const) {
      for (const [name, v] of Object.entries(by)) {
        out.push({ service, kind, name, perCall: calls ? v.count / calls : Number.NaN, meanMs: (v.sum / v.count) * 1000, inFlight: v.sum / seconds });
      }
    }
  }
  return out;
}

const f = (v: number, d = 1): string => (Number.isFinite(v) ? v.toFixed(d) : "–");

/** The pass as Markdown: per scenario and level, the client's whole call, then each stage. */
export function chainMarkdown(rows: readonly ChainRow[], scenarios: readonly Pick<ChainScenario, "name" | "path">[]): string {
  const out: string[] = [];
  out.push(
    "The chain (server-side, from the kernel's and the ledger's metrics scraped before and after each run; `per call`: RPCs or commands per whole call; " +
      "`mean ms`: one's mean duration in the service; `in flight`: their mean number at once over the run). " +
      "A call waits for each RPC on its path whole; the MongoDB commands run inside those RPCs (the kernel's `insert` is the journal's plus its per-second marks and completions, the ledger's is `entries`):",
  );
  out.push("");
  out.push("| scenario | c | stage | per call | mean ms | in flight |");
  out.push("| --- | ---: | --- | ---: | ---: | ---: |");
  for (const r of rows) {
    const path = scenarios.find((s) => s.name === r.scenario)?.path ?? [];
    out.push(
      `| ${r.scenario} | ${r.concurrency} | **whole call (client)**: ${Math.round(r.throughput)} calls/s, p99 ${f(r.client.p99)} ms${r.errors ? `, ${r.errors} errors` : ""} | 1 | ${f(r.client.mean)} | ${f(r.throughput * (r.client.mean / 1000), 1)} |`,
    );
    const rpcs = r.stages.filter((s) => s.kind === "rpc");
    const order = (s: ChainStage): number => {
      const i = path.findIndex((p) => s.name === p || s.name === `${p}s`);
      return i < 0 ? path.length : i;
    };
    // A path step served both as a single RPC and as a batch (BeginCall, BeginCalls): their mean, by count.
    let onPath = 0;
    for (const p of path) {
      const m = rpcs.filter((s) => s.name === p || s.name === `${p}s`);
      const n = m.reduce((a, s) => a + s.perCall, 0);
      if (n > 0) onPath += m.reduce((a, s) => a + s.meanMs * s.perCall, 0) / n;
    }
    for (const s of [...rpcs].sort((a, b) => order(a) - order(b))) {
      const on = order(s) < path.length;
      out.push(`| | | ${s.service} ${s.name}${on ? "" : " (off the path)"} | ${f(s.perCall, 3)} | ${f(s.meanMs, 2)} | ${f(s.inFlight, 2)} |`);
    }
    for (const s of r.stages.filter((x) => x.kind === "command" && x.perCall >= 0.005)) {
      out.push(`| | | ↳ ${s.service} db \`${s.name}\` | ${f(s.perCall, 3)} | ${f(s.meanMs, 2)} | ${f(s.inFlight, 2)} |`);
    }
    out.push(
      `| | | on the path: ${path.join(" → ")} (server) / rest (client queueing, transport, event loops) | | ${f(onPath, 2)} / ${f(r.client.mean - onPath, 2)} | |`,
    );
  }
  return out.join("\n") + "\n";
}
