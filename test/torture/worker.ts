/**
 * The torture worker: an agent runtime as a real process. It recovers what its
 * previous incarnation left pending, then runs operations on the three
 * torture tools with a few concurrent loops until it is killed. Every event
 * goes to an append-only JSON-lines journal of its own (written synchronously,
 * so a SIGKILL loses at most the line being written), which the checker reads:
 *
 *   {"ev":"plan","op","tool"}      before BeginCall
 *   {"ev":"ack","op","dup"}        the ledger acknowledged the op's write
 *   {"ev":"done","op"}             the whole call (begin, write, complete) succeeded
 *   {"ev":"err","op","code","reason","phase"}  an error the runtime saw
 *   {"ev":"recovered","steps"}     a recovery pass
 *
 * Configured by environment: TORTURE_KERNEL, TORTURE_LEDGERS (comma-separated),
 * TORTURE_LOG, TORTURE_INCARNATION, TORTURE_CONCURRENCY, TORTURE_SEED, and
 * TORTURE_MODE=recover-only for the final pass (recover until nothing is left,
 * then exit 0).
 */
import * as fs from "node:fs";
import { KernelClient, KeycapClientError, Runtime, type RecoveryStep } from "../../clients/ts/src";
import { argumentsFor, runtimeTools, type TortureToolId } from "./torture-tools";
import { mulberry32 } from "./prng";

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is required`);
  return v;
}

const logFd = fs.openSync(env("TORTURE_LOG"), "a");
function log(rec: Record<string, unknown>): void {
  fs.writeSync(logFd, JSON.stringify({ t: Date.now(), ...rec }) + "\n");
}

const incarnation = env("TORTURE_INCARNATION");
const random = mulberry32(Number(process.env["TORTURE_SEED"] ?? "1") ^ (Number(incarnation) * 0x9e3779b1));
const kernelAddress = env("TORTURE_KERNEL");
const ledgers = env("TORTURE_LEDGERS").split(",");
const tools = runtimeTools((p, dup) => log({ ev: "ack", op: p.op, dup }));
// One runtime per ledger replica: each call picks a replica at random.
const clients = ledgers.map((ledgerAddress) => new KernelClient(kernelAddress, { ledgerAddress }));
const runtimes = clients.map((c) => new Runtime(c, tools));
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;

function errorRecord(err: unknown): { code: string; reason: string; message: string } {
  const e = KeycapClientError.from(err);
  return { code: e.codeName, reason: e.reason, message: e.message.slice(0, 300) };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Recovery until a pass finds nothing to do (or `passes` run out); every pass is logged. */
async function recoverAll(passes: number): Promise<boolean> {
  for (let i = 0; i < passes; i++) {
    let steps: RecoveryStep[];
    try {
      steps = await pick(runtimes).recover();
    } catch (err) {
      log({ ev: "err", op: "", phase: "recover", ...errorRecord(err) });
      await sleep(200);
      continue;
    }
    const failed = steps.filter((s) => s.result === "failed");
    log({ ev: "recovered", steps: steps.length, failed: failed.length, results: tally(steps.map((s) => s.result)) });
    for (const f of failed)
      log({ ev: "err", op: "", phase: "recover-step", code: f.error?.code ?? "", reason: f.error?.reason ?? "", message: f.detail.slice(0, 300) });
    if (steps.length === 0) return true;
    if (failed.length > 0) await sleep(200);
  }
  return false;
}

function tally(xs: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const x of xs) out[x] = (out[x] ?? 0) + 1;
  return out;
}

let seq = 0;
async function loop(lane: number): Promise<never> {
  for (;;) {
    const r = random();
    const tool: TortureToolId = r < 0.6 ? "torture.charge" : r < 0.8 ? "torture.ticket" : "torture.mail";
    const op = `w${incarnation}-${lane}-${seq++}`;
    log({ ev: "plan", op, tool });
    // An agent retries a failed step in place (same call id, same arguments) when
    // the error says retry and the tool may run again; an Unsafe step never.
    const tries = tool === "torture.mail" ? 1 : 3;
    // Recorded once: a retry sends the very same arguments (requested_at included), as an
    // agent replaying its step would; new arguments under one call id are CALL_ID_CONFLICT.
    const args = argumentsFor(tool, op);
    for (let i = 0; i < tries; i++) {
      try {
        await pick(runtimes).run(tool, args, { callId: `c-${op}` });
        log({ ev: "done", op });
        break;
      } catch (err) {
        const rec = errorRecord(err);
        log({ ev: "err", op, phase: "run", try: i + 1, ...rec });
        if (rec.code !== "UNAVAILABLE" && rec.code !== "DEADLINE_EXCEEDED") break;
        await sleep(100 + random() * 400);
      }
    }
  }
}

async function main(): Promise<void> {
  for (;;) {
    try {
      await runtimes[0]!.registerAll();
      break;
    } catch (err) {
      log({ ev: "err", op: "", phase: "register", ...errorRecord(err) });
      await sleep(200);
    }
  }
  if (process.env["TORTURE_MODE"] === "recover-only") {
    const clean = await recoverAll(50);
    log({ ev: "final", clean });
    process.exit(clean ? 0 : 3);
  }
  await recoverAll(5);
  const lanes = Number(process.env["TORTURE_CONCURRENCY"] ?? "4");
  await Promise.all(Array.from({ length: lanes }, (_, i) => loop(i)));
}

main().catch((err: unknown) => {
  log({ ev: "err", op: "", phase: "main", ...errorRecord(err) });
  process.exit(2);
});
