/**
 * The round-trip pass of `make bench` (`--round-trips`): a stack of its own with a wire
 * tap between each service and the database (bench/wire-tap.ts), driven one request at a
 * time, so what one whole call and one write cost the database is counted, not guessed:
 * commands per collection, bytes sent, log lines, and RPC hops (the kernel's and the
 * ledger's `keycap_rpc_duration_seconds` counts by method, scraped before and after; for the
 * bench-only baseline and peer, which serve no metrics, the client's calls). Each operation
 * runs for at least a few seconds and the count waits for the kernel's settler to finish the
 * seconds it began, so the per-second writes (unsettled-second marks, listing marks, the
 * settler's entries read and completion insert, ADR 0034) are amortised over the calls of
 * those seconds as they are at load. It also holds the baseline to being the same insert as
 * the enforced write: same collection, same command options (write concern), same fields
 * with the same types and sizes.
 */
import { credentials, Metadata } from "@grpc/grpc-js";
import { BaselineServiceClient, type WriteRequest, type WriteResponse } from "../gen/ts/keycap/bench/v1/baseline";
import { defineTool, KernelClient, LedgerClient } from "../clients/ts/src/index";
import { BENCH_WRITE_TOOL_ID } from "./bench-ids";
import { benchKey, CapabilityFactory, newKeySpace } from "./capabilities";
import { TEN_FIELD_DERIVATION, tenFieldArguments } from "./micro";
import { diffActivity, scrapeAll } from "./prom";
import { startStack, type Stack } from "./stack";
import type { InsertShape, TapSnapshot } from "./wire-tap";

/** The whole call as the client makes it now (ADR 0034): the operation the issue's targets read. */
export const CALL_OPERATION = "call (BeginCall → Write; the entry completes it)";
/** The whole call as an older client makes it. */
export const CALL_3HOP_OPERATION = "call, older client (BeginCall → Write → CompleteCall)";
/** Calls in flight in the at-load pass of the whole call. */
export const CALL_AT_LOAD_LANES = 8;
/**
 * The whole call with CALL_AT_LOAD_LANES in flight: its database commands per call "at load"
 * (issue 34), the per-second writes amortised over as many calls as the machine makes with
 * that many in flight — one at a time, a slow or busy machine's rate, not the call's shape,
 * decided the count (CI, 2026-12-06: 2.32 at 37 calls/s, 2.195 at 62). Its hops are not
 * per call: the client groups concurrent BeginCalls (ADR 0022).
 */
export const CALL_AT_LOAD_OPERATION = `call at load (${CALL_AT_LOAD_LANES} in flight)`;

/**
 * How long each operation runs at least, one at a time: a few seconds, so the kernel's
 * per-second writes fall on many calls as they do at load (with few calls a second they
 * would be counted against few calls and overstate the cost per call).
 */
const MIN_SECONDS = 3;
/** How long the kernel's settler takes to finish a second: its 300 ms grace, a 250 ms tick, margin. */
const SETTLE_WAIT_MS = 1_500;

export interface PerOperation {
  operation: string;
  samples: number;
  /** How long the operations ran (one at a time). */
  seconds?: number;
  /**
   * RPCs per operation: "service Method" → count. From the kernel's and the ledger's metrics
   * (`server`), or the bench client's own calls for the baseline and the peer (`client`).
   */
  hops?: { total: number; byMethod: Record<string, number>; source: "server" | "client" };
  /** Service → its database commands per operation, by "command collection". */
  roundTrips: Record<string, { total: number; byCommand: Record<string, number> }>;
  bytesToDatabase: Record<string, number>;
  logLines: Record<string, number>;
}

export interface SameInsert {
  same: boolean;
  differences: string[];
  enforced: InsertShape;
  baseline: InsertShape;
}

export interface RoundTripReport {
  operations: PerOperation[];
  sameInsert: SameInsert;
  /** The peer's entry insert against the baseline's (the peer adds Redis, not a different insert). */
  peerSameInsert?: SameInsert;
}

const CALL_TOOL = "bench.rt.call";
const WRITE_TOOL = BENCH_WRITE_TOOL_ID;

/** Runs the pass on its own stack (started and stopped here). */
export async function measureRoundTrips(
  payload: Buffer,
  samples: number,
  log: (m: string) => void,
  minSeconds: number = MIN_SECONDS,
): Promise<RoundTripReport> {
  const stack = await startStack({ tap: true, peer: true, metrics: true, log });
  const kernel = new KernelClient(stack.kernelAddress, { ledgerAddress: stack.ledgerAddress, token: stack.runtimeToken });
  const ledger = new LedgerClient(stack.ledgerAddress);
  const baseline = new BaselineServiceClient(stack.baselineAddress, credentials.createInsecure());
  const peer = new BaselineServiceClient(stack.peer!.address, credentials.createInsecure());
  try {
    log(`round trips: each operation one at a time for at least ${samples} operations and ${minSeconds} s, through wire taps`);
    const factory = await CapabilityFactory.open(stack.signingKeyFile);
    await kernel.registerTool(
      defineTool({ id: CALL_TOOL, effect: { kind: "idempotent", key: { fields: TEN_FIELD_DERIVATION.fields as [string, ...string[]] } } }),
    );
    const space = newKeySpace("rt");
    const call = async (i: number): Promise<void> => {
      const handle = await kernel.begin(CALL_TOOL, { ...tenFieldArguments(i), order_id: `${space}-${i}` });
      await handle.write(payload);
      // After a write whose entry completes the call this sends nothing (ADR 0034).
      await handle.complete("succeeded");
    };
    const olderClient = async (i: number): Promise<void> => {
      const handle = await kernel.begin(CALL_TOOL, { ...tenFieldArguments(i), order_id: `${space}-old-${i}` });
      await handle.write(payload);
      // What a client from before ADR 0034 sends after the write: CompleteCall.
      await kernel.completeCall(handle.callId, "succeeded");
    };
    // Capabilities are minted in blocks as the operation needs them (it runs for a time, not a count).
    const minted: Awaited<ReturnType<CapabilityFactory["mint"]>> = [];
    const write = async (i: number): Promise<void> => {
      while (minted.length <= i) minted.push(...(await factory.mint(1000, WRITE_TOOL, (j) => benchKey(`${space}-w`, minted.length + j))));
      const it = minted[i]!;
      await ledger.writeWithCapability(it.token, { key: it.key, payload });
    };
    const baselineWrite = (i: number): Promise<WriteResponse> =>
      new Promise((resolve, reject) =>
        baseline.write({ key: benchKey(`${space}-b`, i), payload } satisfies WriteRequest, new Metadata(), (err, res) => (err ? reject(err) : resolve(res))),
      );
    const peerWrite = (i: number): Promise<WriteResponse> =>
      new Promise((resolve, reject) =>
        peer.write({ key: benchKey(`${space}-p`, i), payload } satisfies WriteRequest, new Metadata(), (err, res) => (err ? reject(err) : resolve(res))),
      );
    const run = { samples, minSeconds };
    const operations = [
      await perOperation(stack, CALL_OPERATION, run, call),
      // Its own keys: past the one-at-a-time pass's and both warm-ups'.
      await perOperation(stack, CALL_AT_LOAD_OPERATION, run, (i) => call(2_000_000 + i), undefined, CALL_AT_LOAD_LANES),
      await perOperation(stack, CALL_3HOP_OPERATION, run, olderClient),
      await perOperation(stack, "ledger-write", run, write),
      await perOperation(stack, "ledger-write-baseline", run, baselineWrite, "baseline Write"),
      await perOperation(stack, "peer-powertools (Redis SET NX, insert, SET)", run, peerWrite, "peer Write"),
    ];
    return { operations, sameInsert: compareInserts(stack), peerSameInsert: comparePeerInsert(stack) };
  } finally {
    kernel.close();
    ledger.close();
    baseline.close();
    peer.close();
    await stack.stop();
  }
}

/**
 * Warms up with 20 operations, lets the kernel settle their seconds, then counts operations
 * (`lanes` at a time, one by default) until both `samples` and `minSeconds` are reached and
 * the settler has finished their seconds. `clientHop` names the one RPC each operation sends to a process that serves no
 * metrics (the baseline, the peer); otherwise hops are the kernel's and the ledger's RPCs.
 */
async function perOperation(
  stack: Stack,
  operation: string,
  run: { samples: number; minSeconds: number },
  op: (i: number) => Promise<unknown>,
  clientHop?: string,
  lanes = 1,
): Promise<PerOperation> {
  // The warm-up's keys are past any the measured operations use.
  for (let i = 0; i < 20; i++) await op(1_000_000 + i);
  await new Promise((r) => setTimeout(r, SETTLE_WAIT_MS));
  const taps = stack.taps!;
  const metrics = stack.metrics ? { kernel: stack.metrics.kernel, ledger: stack.metrics.ledger } : undefined;
  const rpcsBefore = metrics && !clientHop ? await scrapeAll(metrics) : undefined;
  for (const t of Object.values(taps)) t.reset();
  const services = { kernel: stack.kernel, ledger: stack.ledger, baseline: stack.baseline, ...(stack.peer ? { peer: stack.peer.proc } : {}) };
  const linesBefore = Object.fromEntries(Object.entries(services).map(([k, s]) => [k, s.lines()]));
  const t0 = performance.now();
  let samples = 0;
  const lane = async (): Promise<void> => {
    while (samples < run.samples || performance.now() - t0 < run.minSeconds * 1000) await op(samples++);
  };
  await Promise.all(Array.from({ length: lanes }, lane));
  const seconds = (performance.now() - t0) / 1000;
  // The settler finishes the last seconds (their entries read, completions, marks removed).
  await new Promise((r) => setTimeout(r, SETTLE_WAIT_MS));
  let hops: PerOperation["hops"];
  if (clientHop) hops = { total: 1, byMethod: { [clientHop]: 1 }, source: "client" };
  const roundTrips: PerOperation["roundTrips"] = {};
  const bytesToDatabase: Record<string, number> = {};
  const logLines: Record<string, number> = {};
  for (const [name, tap] of Object.entries(taps)) {
    const snap: TapSnapshot = tap.snapshot();
    if (snap.messages === 0) continue;
    const byCommand: Record<string, number> = {};
    for (const c of snap.commands) byCommand[`${c.command} ${c.collection}`.trim()] = c.count / samples;
    roundTrips[name] = { total: snap.messages / samples, byCommand };
    bytesToDatabase[name] = snap.bytesToServer / samples;
  }
  for (const [name, s] of Object.entries(services)) logLines[name] = (s.lines() - linesBefore[name]!) / samples;
  // Scraped after the taps' snapshot: a scrape reads the journal (the pending-calls gauge), not counted.
  if (metrics && rpcsBefore) {
    const after = await scrapeAll(metrics);
    const byMethod: Record<string, number> = {};
    for (const svc of ["kernel", "ledger"] as const) {
      for (const [method, v] of Object.entries(diffActivity(rpcsBefore[svc]!, after[svc]!).rpcs)) byMethod[`${svc} ${method}`] = v.count / samples;
    }
    hops = { total: Object.values(byMethod).reduce((a, b) => a + b, 0), byMethod, source: "server" };
  }
  return { operation, samples, seconds, ...(hops ? { hops } : {}), roundTrips, bytesToDatabase, logLines };
}

/** The enforced write's entry insert against the baseline's: every difference, by name. */
export function compareInserts(stack: Stack): SameInsert {
  const enforced = stack.taps!.ledger.inserts.get("entries");
  const baseline = stack.taps!.baseline.inserts.get("entries");
  if (!enforced || !baseline) throw new Error("round trips: no insert into entries seen from the ledger or the baseline");
  return { ...sameShape(enforced, baseline), enforced, baseline };
}

/** The peer's entry insert against the baseline's. */
export function comparePeerInsert(stack: Stack): SameInsert {
  const peer = stack.taps!.peer?.inserts.get("entries");
  const baseline = stack.taps!.baseline.inserts.get("entries");
  if (!peer || !baseline) throw new Error("round trips: no insert into entries seen from the peer or the baseline");
  return { ...sameShape(baseline, peer), enforced: baseline, baseline: peer };
}

export function sameShape(a: InsertShape, b: InsertShape): { same: boolean; differences: string[] } {
  const differences: string[] = [];
  if (a.collection !== b.collection) differences.push(`collection ${a.collection} vs ${b.collection}`);
  const ao = JSON.stringify(a.options);
  const bo = JSON.stringify(b.options);
  if (ao !== bo) differences.push(`command options ${ao} vs ${bo}`);
  const af = a.fields.map((f) => `${f.name}:${f.type}:${f.bytes}`);
  const bf = b.fields.map((f) => `${f.name}:${f.type}:${f.bytes}`);
  for (let i = 0; i < Math.max(af.length, bf.length); i++) if (af[i] !== bf[i]) differences.push(`field ${i}: ${af[i] ?? "none"} vs ${bf[i] ?? "none"}`);
  if (a.documentBytes !== b.documentBytes) differences.push(`document ${a.documentBytes} vs ${b.documentBytes} bytes`);
  return { same: differences.length === 0, differences };
}

/** The pass as Markdown. */
export function roundTripMarkdown(r: RoundTripReport): string {
  const out = [
    "| operation | hops / op | service | round trips / op | commands / op | bytes to db / op | log lines / op |",
    "| --- | --- | --- | ---: | --- | ---: | ---: |",
  ];
  for (const op of r.operations) {
    const h = op.hops;
    const hops = h
      ? `**${+h.total.toFixed(2)}** (${Object.entries(h.byMethod)
          .map(([k, v]) => `${k} ×${+v.toFixed(3)}`)
          .join(", ")}${h.source === "client" ? "; client calls" : ""})`
      : "–";
    const services = Object.keys(op.roundTrips);
    const dbTotal = services.reduce((n, svc) => n + op.roundTrips[svc]!.total, 0);
    out.push(
      `| **${op.operation}** (${op.samples} in ${op.seconds !== undefined ? `${op.seconds.toFixed(1)} s` : "?"}) | ${hops} | all | **${+dbTotal.toFixed(2)}** | | ${Math.round(services.reduce((n, svc) => n + (op.bytesToDatabase[svc] ?? 0), 0))} | |`,
    );
    for (const [svc, rt] of Object.entries(op.roundTrips)) {
      const cmds = Object.entries(rt.byCommand)
        .map(([k, v]) => `${k} ×${+v.toFixed(2)}`)
        .join(", ");
      out.push(`| | | ${svc} | ${+rt.total.toFixed(2)} | ${cmds} | ${Math.round(op.bytesToDatabase[svc] ?? 0)} | ${+(op.logLines[svc] ?? 0).toFixed(2)} |`);
    }
  }
  out.push("");
  const s = r.sameInsert;
  out.push(
    s.same
      ? `Baseline insert = enforced insert: collection \`${s.enforced.collection}\`, options ${JSON.stringify(s.enforced.options)}, ${s.enforced.fields.length} fields with the same names, types and sizes, ${s.enforced.documentBytes} bytes.`
      : `Baseline insert DIFFERS from the enforced insert: ${s.differences.join("; ")}`,
  );
  const p = r.peerSameInsert;
  if (p) {
    out.push("");
    out.push(
      p.same
        ? `Peer insert = baseline insert: collection \`${p.baseline.collection}\`, options ${JSON.stringify(p.baseline.options)}, ${p.baseline.fields.length} fields with the same names, types and sizes, ${p.baseline.documentBytes} bytes (the peer adds Redis, not a different insert).`
        : `Peer insert DIFFERS from the baseline insert: ${p.differences.join("; ")}`,
    );
  }
  return out.join("\n") + "\n";
}
