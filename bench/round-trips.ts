/**
 * The round-trip pass of `make bench` (`--round-trips`): a stack of its own with a wire
 * tap between each service and the database (bench/wire-tap.ts), driven one request at a
 * time, so what one whole call and one write cost the database is counted, not guessed:
 * commands per collection, bytes sent, log lines. It also holds the baseline to being the
 * same insert as the enforced write: same collection, same command options (write
 * concern), same fields with the same types and sizes.
 */
import { credentials, Metadata } from "@grpc/grpc-js";
import { BaselineServiceClient, type WriteRequest, type WriteResponse } from "../gen/ts/keycap/bench/v1/baseline";
import { defineTool, KernelClient, LedgerClient } from "../clients/ts/src/index";
import { BENCH_WRITE_TOOL_ID } from "./bench-ids";
import { benchKey, CapabilityFactory, newKeySpace } from "./capabilities";
import { TEN_FIELD_DERIVATION, tenFieldArguments } from "./micro";
import { startStack, type Stack } from "./stack";
import type { InsertShape, TapSnapshot } from "./wire-tap";

export interface PerOperation {
  operation: string;
  samples: number;
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
export async function measureRoundTrips(payload: Buffer, samples: number, log: (m: string) => void): Promise<RoundTripReport> {
  const stack = await startStack({ tap: true, peer: true, log });
  const kernel = new KernelClient(stack.kernelAddress, { ledgerAddress: stack.ledgerAddress, token: stack.runtimeToken });
  const ledger = new LedgerClient(stack.ledgerAddress);
  const baseline = new BaselineServiceClient(stack.baselineAddress, credentials.createInsecure());
  const peer = new BaselineServiceClient(stack.peer!.address, credentials.createInsecure());
  try {
    log(`round trips: ${samples} of each operation, one at a time, through wire taps`);
    const factory = await CapabilityFactory.open(stack.signingKeyFile);
    await kernel.registerTool(
      defineTool({ id: CALL_TOOL, effect: { kind: "idempotent", key: { fields: TEN_FIELD_DERIVATION.fields as [string, ...string[]] } } }),
    );
    const space = newKeySpace("rt");
    const call = async (i: number): Promise<void> => {
      const handle = await kernel.begin(CALL_TOOL, { ...tenFieldArguments(i), order_id: `${space}-${i}` });
      await handle.write(payload);
      await handle.complete("succeeded");
    };
    const writes = await factory.mint(samples + 20, WRITE_TOOL, (i) => benchKey(`${space}-w`, i));
    const write = async (i: number): Promise<void> => {
      const it = writes[i]!;
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
    const operations = [
      await perOperation(stack, "call (BeginCall → Write → CompleteCall)", samples, call),
      await perOperation(stack, "ledger-write", samples, write),
      await perOperation(stack, "ledger-write-baseline", samples, baselineWrite),
      await perOperation(stack, "peer-powertools (Redis SET NX, insert, SET)", samples, peerWrite),
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

/** Warms up with 20 operations (or `warm`), then counts `samples` sequential ones. */
async function perOperation(
  stack: Stack,
  operation: string,
  samples: number,
  op: (i: number) => Promise<unknown>,
  warm: (i: number) => Promise<unknown> = (i) => op(samples + i),
): Promise<PerOperation> {
  for (let i = 0; i < 20; i++) await warm(i);
  const taps = stack.taps!;
  for (const t of Object.values(taps)) t.reset();
  const services = { kernel: stack.kernel, ledger: stack.ledger, baseline: stack.baseline, ...(stack.peer ? { peer: stack.peer.proc } : {}) };
  const linesBefore = Object.fromEntries(Object.entries(services).map(([k, s]) => [k, s.lines()]));
  for (let i = 0; i < samples; i++) await op(i);
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
  return { operation, samples, roundTrips, bytesToDatabase, logLines };
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
  const out = ["| operation | service | round trips / op | commands / op | bytes to db / op | log lines / op |", "| --- | --- | ---: | --- | ---: | ---: |"];
  for (const op of r.operations) {
    for (const [svc, rt] of Object.entries(op.roundTrips)) {
      const cmds = Object.entries(rt.byCommand)
        .map(([k, v]) => `${k} ×${+v.toFixed(2)}`)
        .join(", ");
      out.push(
        `| ${op.operation} | ${svc} | ${+rt.total.toFixed(2)} | ${cmds} | ${Math.round(op.bytesToDatabase[svc] ?? 0)} | ${+(op.logLines[svc] ?? 0).toFixed(2)} |`,
      );
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
