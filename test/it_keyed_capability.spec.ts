/**
 * The keyed-capability acceptance suite (issue 5): the whole mechanism end
 * to end, with real kernel, ledger and tool-runner processes on a real
 * MongoDB-protocol server. Each numbered step is its own test and guards one
 * feature; the comments say which false pass it rules out.
 */
import { unchecked } from "./support/unchecked-tool";
import type { Tool } from "../gen/ts/keycap/kernel/v1/kernel";
import { expect } from "chai";
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { MongoClient } from "mongodb";
import * as path from "node:path";
import * as readline from "node:readline";
import { CallState, ResumeAction } from "../gen/ts/keycap/kernel/v1/kernel";
import { AdminClient, KernelClient, LedgerClient, Runtime } from "../clients/ts/src";
import { charge, notify, tools, transfer } from "./support/acceptance-tools";
import { freePort } from "./support/ports";
import { refusal } from "./support/refusal";
import { runCli, serviceEnv, startService, type ServiceProcess } from "./support/processes";

const ADMIN_TOKEN = "acceptance-admin-token-0123456789";

/** Runs one call in a tool-runner process that stops at a crash point; resolves once it is there. */
async function runnerAtCrashPoint(
  point: "before-write" | "after-write",
  kernel: string,
  ledger: string,
  toolId: string,
  args: object,
  runId: string,
  callId: string,
): Promise<ChildProcess> {
  const child = spawn(process.execPath, [path.resolve("dist/test/support/tool-runner.js"), kernel, ledger, toolId, JSON.stringify(args), runId, callId], {
    env: { ...process.env, KEYCAP_TEST_CRASH_POINT: point },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`tool-runner never reached ${point}: ${err}`)), 20_000);
    readline.createInterface({ input: child.stdout! }).on("line", (line) => {
      if (line.startsWith(`CRASH-POINT ${point} ${callId}`)) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`tool-runner exited ${code} before ${point}: ${err}`));
    });
  });
  return child;
}

async function sigkill(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGKILL");
  await exited;
}

describe("keyed capability: acceptance (real kernel, ledger and tool processes; real MongoDB)", function () {
  this.timeout(120_000);
  let env: Record<string, string>;
  let kernelProc: ServiceProcess;
  let ledgerProc: ServiceProcess;
  let kernelAddr: string;
  let ledgerAddr: string;
  let kernel: KernelClient;
  let admin: AdminClient;
  let ledgerRaw: LedgerClient;
  let runtime: Runtime;

  async function startKernel(): Promise<void> {
    kernelProc = await startService("kernel", env);
    kernel = new KernelClient(kernelAddr, { ledgerAddress: ledgerAddr });
    runtime = new Runtime(kernel, tools);
  }

  async function entriesFor(toolId: string): Promise<number> {
    return (await admin.listEntries(toolId)).length;
  }

  before(async function () {
    kernelAddr = `127.0.0.1:${await freePort()}`;
    ledgerAddr = `127.0.0.1:${await freePort()}`;
    env = serviceEnv({
      KEYCAP_KERNEL_LISTEN: kernelAddr,
      KEYCAP_LEDGER_LISTEN: ledgerAddr,
      KEYCAP_KERNEL_ADDRESS: kernelAddr,
      KEYCAP_LEDGER_ADDRESS: ledgerAddr,
      KEYCAP_ADMIN_TOKEN: ADMIN_TOKEN,
    });
    await startKernel();
    ledgerProc = await startService("ledger", env);
    admin = new AdminClient(ledgerProc.endpoints.admin!, ADMIN_TOKEN);
    ledgerRaw = new LedgerClient(ledgerAddr);
    await runtime.registerAll();
  });

  after(async function () {
    kernel?.close();
    admin?.close();
    ledgerRaw?.close();
    await kernelProc?.stop("SIGKILL").catch(() => undefined);
    await ledgerProc?.stop("SIGKILL").catch(() => undefined);
  });

  // Every fixture of test/compile-fail/ (with its compile-pass twin) runs in
  // test/compile_fail.spec.ts (`npm run test:compile-fail`); step 1 runs the main one here too.
  it("1. compile-fail: an Idempotent registration with no KeyDerivation does not compile; tsc names the missing field key", async function () {
    const fixture = "test/compile-fail/idempotent-without-key.fail.ts";
    const twin = "test/compile-fail/idempotent-with-key.pass.ts";
    const tsc = (file: string): Promise<{ code: number; out: string }> =>
      new Promise((resolve) => {
        const args = [
          "node_modules/typescript/bin/tsc",
          "--noEmit",
          "--strict",
          "--target",
          "ES2022",
          "--module",
          "node20",
          "--skipLibCheck",
          "--esModuleInterop",
          "--types",
          "node",
          "--pretty",
          "false",
          file,
        ];
        execFile(process.execPath, args, (err, stdout, stderr) => resolve({ code: err ? 1 : 0, out: stdout + stderr }));
      });
    const [fail, pass] = await Promise.all([tsc(fixture), tsc(twin)]);
    expect(pass.code, pass.out).to.equal(0);
    expect(fail.code).to.equal(1);
    expect(fail.out).to.include(fixture);
    expect(fail.out).to.include("Property 'key' is missing");
  });

  it("1b. over gRPC (any language) the same registration is refused with INVALID_ARGUMENT naming key", async function () {
    const err = await refusal(
      kernel.registerToolProto(
        unchecked({
          toolId: "acceptance.nokey",
          effectClass: { kind: { $case: "idempotent", value: { key: undefined } } },
          argumentsSchemaJson: "",
          registeredAt: undefined,
          owner: "",
          httpDestination: undefined,
        }),
      ),
    );
    expect(err.codeName).to.equal("INVALID_ARGUMENT");
    expect(err.reason).to.equal("KEY_DERIVATION_REQUIRED");
    expect(err.message).to.include("idempotent.key");
  });

  it("2. happy path: the tool completes its write; the ledger holds one entry under the kernel-supplied key", async function () {
    const { handle } = await runtime.run(charge.id, { order_id: "O-1", amount_cents: 1250 }, { runId: "run-A" });
    expect(handle.key).to.match(/^[A-Za-z0-9_-]{43}$/);
    const entry = await admin.getEntryByKey(handle.key);
    expect(entry?.key).to.equal(handle.key);
    expect(entry?.toolId).to.equal(charge.id);
    expect(entry?.callId).to.equal(handle.callId);
    expect(await entriesFor(charge.id)).to.equal(1);
    const call = (await kernel.resumeCall(handle.callId)).call;
    expect(call?.state).to.equal(CallState.CALL_STATE_COMPLETED);
  });

  it("3. duplicate call: same arguments again derive the identical key; still exactly one entry", async function () {
    const begun = await kernel.beginCall(charge.id, '{"order_id":"O-1","amount_cents":1250}', { runId: "run-A" });
    const first = await admin.getEntryByKey(begun.call!.key);
    // The capability states how its key was derived, so a sink holding only the arguments can re-derive it (ADR 0026).
    const claims = JSON.parse(Buffer.from(begun.capability.split(".")[1]!, "base64url").toString()) as Record<string, unknown>;
    expect(claims["derivation"]).to.deep.equal({ version: 1, fields: ["/order_id", "/amount_cents"], context: { run_id: "run-A" } });
    const { handle, output } = await runtime.run(charge.id, { amount_cents: 1250, order_id: "O-1", requested_at: "2026-12-02T12:00:00Z" }, { runId: "run-A" });
    expect(handle.key).to.equal(first?.key);
    expect(output).to.equal(`duplicate ${first?.entryId}`);
    expect(await entriesFor(charge.id)).to.equal(1);
  });

  it("3b. dedupe is by key only: the same payload under two keys is two effects; one key with two payloads is one, flagged", async function () {
    // Rules out a ledger that deduplicates on content.
    const before = await entriesFor(charge.id);
    const a = await kernel.begin(charge.id, { order_id: "K-1", amount_cents: 1 }, { runId: "run-K" });
    const b = await kernel.begin(charge.id, { order_id: "K-2", amount_cents: 1 }, { runId: "run-K" });
    await a.write("same payload");
    await b.write("same payload");
    expect(await entriesFor(charge.id)).to.equal(before + 2);
    const again = await kernel.begin(charge.id, { order_id: "K-1", amount_cents: 1 }, { runId: "run-K" });
    const res = await again.write("a different payload");
    expect(res.duplicate).to.equal(true);
    expect(res.payloadMismatch).to.equal(true);
    expect((await admin.getEntryByKey(a.key))?.payloadMismatch).to.equal(true);
    expect(await entriesFor(charge.id)).to.equal(before + 2);
  });

  it("4. out-of-band write: the tool writes under a key of its own; denied at call time and read back from the audit under its tool id", async function () {
    const begun = await kernel.beginCall(charge.id, '{"order_id":"O-OOB","amount_cents":5}', { runId: "run-A" });
    const boundKey = begun.call!.key;
    const before = await entriesFor(charge.id);
    const err = await refusal(ledgerRaw.writeWithCapability(begun.capability, { key: "my-own-key", payload: Buffer.from("x") }));
    expect(err.codeName).to.equal("PERMISSION_DENIED");
    expect(err.reason).to.equal("KEY_MISMATCH");
    expect(await entriesFor(charge.id)).to.equal(before);
    const audit = await admin.listRejections({ toolId: charge.id, reason: "KEY_MISMATCH" });
    const record = audit.find((r) => r.callId === begun.call!.callId);
    expect(record, "the denial must be in the audit").to.not.equal(undefined);
    expect(record?.toolIdVerified).to.equal(true);
    expect(record?.attemptedKey).to.equal("my-own-key");
    expect(record?.capabilityKey).to.equal(boundKey);
  });

  describe("5. recovery is a write (tool-runner SIGKILLed mid-call; recovery through `keycap recover`)", function () {
    const recoverEnv = (): Record<string, string> => ({ ...env, KEYCAP_KERNEL_ADDRESS: kernelAddr, KEYCAP_LEDGER_ADDRESS: ledgerAddr });
    const handlers = path.resolve("dist/test/support/acceptance-tools.js");

    async function recoverAndCheck(callId: string, expectedEntries: number, key: () => Promise<string>): Promise<void> {
      const dry = await runCli(["recover", "--tool", charge.id, "--dry-run", "--json", "--handlers", handlers], recoverEnv());
      expect(dry.code, dry.stdout + dry.stderr).to.equal(0);
      const planned = (JSON.parse(dry.stdout) as { callId: string; plan: string; result: string }[]).find((s) => s.callId === callId);
      expect(planned?.plan).to.equal("retry-under-same-key");
      expect(planned?.result).to.equal("dry-run");

      const real = await runCli(["recover", "--tool", charge.id, "--json", "--handlers", handlers], recoverEnv());
      expect(real.code, real.stdout + real.stderr).to.equal(0);
      const done = (JSON.parse(real.stdout) as { callId: string; result: string; attempt: number }[]).find((s) => s.callId === callId);
      expect(done?.result, real.stdout).to.equal("completed");
      expect(done?.attempt).to.equal(2);

      const entry = await admin.getEntryByKey(await key());
      expect(entry?.callId).to.equal(callId);
      const calls = (await admin.listEntries(charge.id)).filter((e) => e.callId === callId);
      expect(calls).to.have.length(expectedEntries);
      expect((await kernel.resumeCall(callId)).action).to.equal(ResumeAction.RESUME_ACTION_ALREADY_COMPLETED);

      const second = await runCli(["recover", "--tool", charge.id, "--json", "--handlers", handlers], recoverEnv());
      expect(JSON.parse(second.stdout)).to.deep.equal([]);
    }

    it("killed before its ledger write: the retry succeeds and writes the one effect", async function () {
      const args = { order_id: "CR-1", amount_cents: 700 };
      const runner = await runnerAtCrashPoint("before-write", kernelAddr, ledgerAddr, charge.id, args, "run-crash", "crash-before-write");
      await sigkill(runner);
      const pending = (await kernel.listPendingCalls(charge.id)).find((c) => c.callId === "crash-before-write");
      expect(pending?.state).to.equal(CallState.CALL_STATE_PENDING);
      expect(await admin.getEntryByKey(pending!.key)).to.equal(undefined);
      await recoverAndCheck("crash-before-write", 1, async () => pending!.key);
    });

    it("killed after the write, before it could complete the call: the entry completes it (ADR 0034); nothing is left to recover, still one entry", async function () {
      const args = { order_id: "CR-2", amount_cents: 800 };
      const runner = await runnerAtCrashPoint("after-write", kernelAddr, ledgerAddr, charge.id, args, "run-crash", "crash-after-write");
      await sigkill(runner);
      expect((await kernel.listPendingCalls(charge.id)).map((c) => c.callId)).to.not.include("crash-after-write");
      const call = (await kernel.getCall("crash-after-write"))?.call;
      expect(call?.state).to.equal(CallState.CALL_STATE_COMPLETED);
      const entry = await admin.getEntryByKey(call!.key);
      expect(entry?.callId).to.equal("crash-after-write");
      expect((await kernel.resumeCall("crash-after-write")).action).to.equal(ResumeAction.RESUME_ACTION_ALREADY_COMPLETED);
      const recovered = await runCli(["recover", "--tool", charge.id, "--json", "--handlers", handlers], recoverEnv());
      expect(recovered.code, recovered.stdout + recovered.stderr).to.equal(0);
      expect((JSON.parse(recovered.stdout) as { callId: string }[]).map((st) => st.callId)).to.not.include("crash-after-write");
      expect((await admin.getEntryByKey(call!.key))?.duplicateCount).to.equal(0);
    });

    it("the kernel is SIGKILLed too, before it settled the call: the call is found in its unsettled second and recovery writes the one effect", async function () {
      const args = { order_id: "CR-3", amount_cents: 900 };
      const runner = await runnerAtCrashPoint("before-write", kernelAddr, ledgerAddr, charge.id, args, "run-crash", "crash-kernel-too");
      await sigkill(runner);
      kernel.close();
      await kernelProc.stop("SIGKILL");
      await startKernel();
      const pending = (await kernel.listPendingCalls(charge.id)).find((c) => c.callId === "crash-kernel-too");
      expect(pending, "the pending call survives the kernel crash").to.not.equal(undefined);
      await recoverAndCheck("crash-kernel-too", 1, async () => pending!.key);
    });
  });

  it("5d. recovery re-derives the key from the recorded arguments: a journal whose key no longer re-derives is refused, never retried under another key", async function () {
    const begun = await kernel.beginCall(charge.id, '{"order_id":"RD-1","amount_cents":1}', { runId: "run-RD", callId: "rederive-1" });
    expect(begun.call?.key).to.match(/^[A-Za-z0-9_-]{43}$/);
    const client = await MongoClient.connect(env["MONGODB_URI"]!);
    try {
      // Tamper with the recorded arguments behind the kernel's back, as a changed derivation would.
      await client
        .db(env["KEYCAP_MONGODB_DATABASE"]!)
        .collection<{ _id: string; arguments_json: string }>("calls")
        .updateOne({ _id: "rederive-1" }, { $set: { arguments_json: '{"order_id":"RD-2","amount_cents":1}' } });
    } finally {
      await client.close();
    }
    const err = await refusal(kernel.resumeCall("rederive-1"));
    expect(err.codeName).to.equal("FAILED_PRECONDITION");
    expect(err.reason).to.equal("KEY_REDERIVATION_MISMATCH");
    const pending = (await kernel.listPendingCalls(charge.id)).find((c) => c.callId === "rederive-1");
    expect(pending?.attempt, "no new attempt was issued").to.equal(1);
    expect((await admin.listEntries(charge.id)).filter((e) => e.callId === "rederive-1")).to.have.length(0);
    // What an operator does with such a call: settle it by hand.
    await kernel.completeCall("rederive-1", "failed", "journal no longer re-derives its key");
  });

  it("6. determinism: 100 derivations from the same recorded arguments are identical; a timestamp is ignored, and naming it is refused", async function () {
    const keys = new Set<string>();
    for (let i = 0; i < 100; i++) {
      const at = new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString();
      keys.add((await kernel.beginCall(charge.id, JSON.stringify({ order_id: "D-1", amount_cents: 42, requested_at: at }), { runId: "run-D" })).call!.key);
    }
    expect(keys.size).to.equal(1);
    const err = await refusal(
      kernel.registerTool({
        id: "acceptance.charge.by-time",
        effect: { kind: "idempotent", key: { fields: ["/order_id", "/requested_at"] } },
        argumentsSchema: charge.argumentsSchema,
      }),
    );
    expect(err.codeName).to.equal("INVALID_ARGUMENT");
    expect(err.reason).to.equal("KEY_FIELD_VOLATILE");
    expect(err.message).to.include("/requested_at");
  });

  describe("7. unaffected classes", function () {
    it("Queryable and Unsafe tools write without keys and are not refused for lacking one", async function () {
      const q = await kernel.begin(notify.id, { request_id: "REQ-1", to: "ops@example.com" });
      expect(q.key).to.equal("");
      expect((await q.write("mail")).duplicate).to.equal(false);
      const u = await kernel.begin(transfer.id, { amount: 5 });
      expect(u.key).to.equal("");
      expect((await u.write("moved")).duplicate).to.equal(false);
      expect(await entriesFor(notify.id)).to.equal(1);
      expect(await entriesFor(transfer.id)).to.equal(1);
    });

    it("Queryable recovery finds the done effect through the lookup and does not write again", async function () {
      const runner = await runnerAtCrashPoint("after-write", kernelAddr, ledgerAddr, notify.id, { request_id: "REQ-CRASH" }, "", "q-crash");
      await sigkill(runner);
      const before = await entriesFor(notify.id);
      const steps = await runtime.recover({ toolIds: [notify.id] });
      const step = steps.find((s) => s.callId === "q-crash");
      expect(step?.plan).to.equal("ask-ledger-then-retry");
      expect(step?.result).to.equal("done-in-ledger");
      expect(await entriesFor(notify.id)).to.equal(before);
      const entry = (await admin.listEntries(notify.id)).find((e) => e.requestId === "REQ-CRASH");
      expect(entry?.duplicateCount).to.equal(0);
      expect((await kernel.resumeCall("q-crash")).action).to.equal(ResumeAction.RESUME_ACTION_ALREADY_COMPLETED);
    });

    it("Queryable recovery retries when the ledger has no effect for the request id", async function () {
      const runner = await runnerAtCrashPoint("before-write", kernelAddr, ledgerAddr, notify.id, { request_id: "REQ-RETRY" }, "", "q-retry");
      await sigkill(runner);
      const steps = await runtime.recover({ toolIds: [notify.id] });
      expect(steps.find((s) => s.callId === "q-retry")?.result).to.equal("completed");
      expect((await admin.listEntries(notify.id)).filter((e) => e.requestId === "REQ-RETRY")).to.have.length(1);
    });

    it("Unsafe recovery refuses and marks the call indeterminate; it is never retried; an operator lists and settles it", async function () {
      const runner = await runnerAtCrashPoint("before-write", kernelAddr, ledgerAddr, transfer.id, { amount: 9 }, "", "u-crash");
      await sigkill(runner);
      const dry = await runCli(["recover", "--tool", transfer.id, "--dry-run", "--json"], { ...env });
      expect((JSON.parse(dry.stdout) as { callId: string; plan: string }[]).find((s) => s.callId === "u-crash")?.plan).to.equal("mark-indeterminate");
      const before = await entriesFor(transfer.id);
      const steps = await runtime.recover({ toolIds: [transfer.id] });
      expect(steps.find((s) => s.callId === "u-crash")?.result).to.equal("indeterminate");
      expect(await entriesFor(transfer.id)).to.equal(before);
      expect((await kernel.listPendingCalls(transfer.id)).map((c) => c.callId)).to.not.include("u-crash");
      const err = await refusal(kernel.resumeCall("u-crash"));
      expect(err.codeName).to.equal("FAILED_PRECONDITION");
      expect(err.reason).to.equal("CALL_INDETERMINATE");

      // The operator finds it, decides, and settles it by hand.
      const listed = await runCli(["calls", "--state", "indeterminate", "--tool", transfer.id, "--json"], { ...env });
      expect(listed.code, listed.stderr).to.equal(0);
      expect((JSON.parse(listed.stdout) as { callId: string }[]).map((c) => c.callId)).to.include("u-crash");
      const settled = await runCli(["complete", "u-crash", "--outcome", "failed", "--detail", "checked the bank: no transfer"], { ...env });
      expect(settled.code, settled.stderr).to.equal(0);
      expect(settled.stdout).to.include("completed as failed");
      expect((await kernel.listIndeterminateCalls(transfer.id)).map((c) => c.callId)).to.not.include("u-crash");
      expect((await kernel.resumeCall("u-crash")).action).to.equal(ResumeAction.RESUME_ACTION_ALREADY_COMPLETED);
    });
  });
});
