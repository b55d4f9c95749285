/**
 * The torture worker: an agent runtime as a real process. It recovers what its
 * previous incarnation left pending, then runs operations on the three
 * torture tools with a few concurrent loops until it is killed. Every event
 * goes to an append-only JSON-lines journal of its own (written synchronously,
 * so a SIGKILL loses at most the line being written), which the checker reads:
 *
 *   {"ev":"plan","op","tool","sandbox"?}  before BeginCall (sandbox: "shadow" | "replay")
 *   {"ev":"ack","op","dup","shadow"?,"replayed"?}  the ledger acknowledged the op's write
 *   {"ev":"denied","op","reason"}  an Unsafe call of a sandbox run was denied (as it must be)
 *   {"ev":"done","op"}             the whole call (begin, write, complete) succeeded
 *   {"ev":"err","op","code","reason","phase"}  an error the runtime saw
 *   {"ev":"late","op"}             a replay step not begun: its recording may be past retention
 *   {"ev":"recovered","steps"}     a recovery pass
 *
 * Configured by environment: TORTURE_KERNEL, TORTURE_LEDGERS (comma-separated),
 * TORTURE_LOG, TORTURE_INCARNATION, TORTURE_CONCURRENCY, TORTURE_SEED,
 * TORTURE_SANDBOX=off to run live lanes only, and TORTURE_MODE=recover-only for
 * the final pass (recover until nothing is left, then exit 0).
 *
 * Beside the live lanes (issue 30, ADR 0028): a shadow lane runs ops of its own in a
 * shadow run (their writes must land in the shadow store only), and a replay lane records
 * a short live run, then replays it with the same arguments (its writes must be answered
 * from the recorded effects, nothing new written). Unsafe calls in both are denied.
 */
import * as fs from "node:fs";
import { KernelClient, KeycapClientError, Runtime, type BeginOptions, type RecoveryStep } from "../../clients/ts/src";
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
const tools = runtimeTools((p, f) =>
  log({ ev: "ack", op: p.op, dup: f.duplicate, ...(f.shadow ? { shadow: true } : {}), ...(f.replayed ? { replayed: true } : {}) }),
);
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
const pickTool = (): TortureToolId => {
  const r = random();
  return r < 0.6 ? "torture.charge" : r < 0.8 ? "torture.ticket" : "torture.mail";
};

/**
 * One step as an agent runs it: retried in place (same call id, the very same arguments,
 * requested_at included) when the error says retry and the tool may run again; an Unsafe
 * step never. An Unsafe step a sandbox run denied is logged as denied, not as an error.
 */
async function step(
  on: readonly Runtime[],
  tool: TortureToolId,
  op: string,
  args: Record<string, unknown>,
  opts: BeginOptions,
  sandbox = false,
  notAfter = Infinity,
): Promise<"done" | "denied" | "failed"> {
  const tries = tool === "torture.mail" ? 1 : 3;
  for (let i = 0; i < tries; i++) {
    if (Date.now() > notAfter) {
      log({ ev: "late", op });
      return "failed";
    }
    try {
      await pick(on).run(tool, args, opts);
      log({ ev: "done", op });
      return "done";
    } catch (err) {
      const rec = errorRecord(err);
      if (sandbox && rec.reason === "SANDBOX_UNSAFE_DENIED") {
        log({ ev: "denied", op, reason: rec.reason });
        return "denied";
      }
      log({ ev: "err", op, phase: "run", try: i + 1, ...rec });
      if (rec.code !== "UNAVAILABLE" && rec.code !== "DEADLINE_EXCEEDED") return "failed";
      await sleep(100 + random() * 400);
    }
  }
  return "failed";
}

async function loop(lane: number): Promise<never> {
  for (;;) {
    const tool = pickTool();
    const op = `w${incarnation}-${lane}-${seq++}`;
    log({ ev: "plan", op, tool });
    await step(runtimes, tool, op, argumentsFor(tool, op), { callId: `c-${op}` });
  }
}

/** Ops of its own in one shadow run per incarnation: their effects may reach the shadow store only. */
async function shadowLane(): Promise<never> {
  const shadows = clients.map((c) => new Runtime(c, tools, { mode: "shadow" }));
  for (;;) {
    const tool = pickTool();
    const op = `s${incarnation}-${seq++}`;
    log({ ev: "plan", op, tool, sandbox: "shadow" });
    await step(shadows, tool, op, argumentsFor(tool, op), { callId: `c-${op}`, runId: `shadow-w${incarnation}` }, true);
  }
}

/**
 * How long after a recording begins its replay may still begin a step: the services' calls
 * retention less a margin for a call's own time and the sweep's whole seconds (unbounded when
 * retention is off).
 */
const REPLAY_WITHIN_MS = process.env["TORTURE_RETENTION_CALLS_SECONDS"] ? Number(process.env["TORTURE_RETENTION_CALLS_SECONDS"]) * 1000 - 8_000 : Infinity;

/** Records a short live run, then replays it call by call with the same arguments: no new effect may come of the replay. */
async function replayLane(): Promise<never> {
  for (let k = 0; ; k++) {
    const recorded = `rec-w${incarnation}-${k}`;
    const steps: { tool: TortureToolId; op: string; args: Record<string, unknown> }[] = [];
    let whole = true;
    const recordedAt = Date.now();
    for (let i = 0; i < 3; i++) {
      const tool = pickTool();
      const op = `w${incarnation}-r${k}-${i}`;
      const args = argumentsFor(tool, op);
      log({ ev: "plan", op, tool });
      whole = (await step(runtimes, tool, op, args, { callId: `c-${op}`, runId: recorded })) === "done" && whole;
      steps.push({ tool, op, args });
    }
    // A recorded run with a call that did not finish is not replayed: its positions may not line up.
    if (!whole) continue;
    const replays = clients.map((c) => new Runtime(c, tools, { mode: "replay", replayOf: recorded }));
    for (const s of steps) {
      log({ ev: "plan", op: s.op, tool: s.tool, sandbox: "replay" });
      // A step that got no answer may or may not hold its position: the replay stops there. So
      // does one the recording may have outlived: retention removes its calls, and a run is
      // replayed only while they are kept (docs/retention.md), so its divergence is no defect.
      const notAfter = recordedAt + REPLAY_WITHIN_MS;
      if ((await step(replays, s.tool, s.op, s.args, { callId: `c-${s.op}-replay`, runId: `${recorded}-replay` }, true, notAfter)) === "failed") break;
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
  const sandbox = process.env["TORTURE_SANDBOX"] === "off" ? [] : [shadowLane(), replayLane()];
  await Promise.all([...Array.from({ length: lanes }, (_, i) => loop(i)), ...sandbox]);
}

main().catch((err: unknown) => {
  log({ ev: "err", op: "", phase: "main", ...errorRecord(err) });
  process.exit(2);
});
