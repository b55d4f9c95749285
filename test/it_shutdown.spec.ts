import { expect } from "chai";
import { KernelClient, KeycapClientError } from "../clients/ts/src";
import { serviceEnv, startService } from "./support/processes";

describe("graceful shutdown: SIGTERM lets in-flight calls finish, then exits 0", function () {
  it("answers every call that was in flight when SIGTERM arrived, and journals each one it accepted", async function () {
    const env = serviceEnv();
    const proc = await startService("kernel", env);
    // One RPC per call (no coalescing, ADR 0022): all 300 are on the server when SIGTERM
    // arrives, which is what the drain is about; calls a client still holds then are calls
    // begun after the signal.
    const kernel = new KernelClient(proc.endpoints.kernel!, { coalesce: false });
    await kernel.registerTool({ id: "drain.tool", effect: { kind: "idempotent", key: { fields: ["/n"] } } });
    await kernel.beginCall("drain.tool", '{"n":-1}'); // the channel is connected before the burst

    let sigtermAt = 0;
    const outcomes = Array.from({ length: 300 }, (_, n) =>
      kernel.beginCall("drain.tool", JSON.stringify({ n }), { callId: `drain-${n}` }).then(
        () => ({ n, ok: true, code: "OK", at: Date.now() }),
        (err: unknown) => ({ n, ok: false, code: KeycapClientError.from(err).codeName, at: Date.now() }),
      ),
    );
    await new Promise((r) => setTimeout(r, 30));
    sigtermAt = Date.now();
    const exit = proc.stop("SIGTERM", 20_000);
    const results = await Promise.all(outcomes);
    expect(await exit).to.equal(0);
    kernel.close();

    // Nothing in flight was cut off: an answer is either a completed call or a refusal
    // to start one (UNAVAILABLE), never a cancelled or failed half-call.
    const codes = new Set(results.map((r) => r.code));
    for (const c of codes) expect(["OK", "UNAVAILABLE"], `unexpected ${c}`).to.include(c);
    const okAfterSignal = results.filter((r) => r.ok && r.at > sigtermAt);
    expect(okAfterSignal.length, "calls in flight at SIGTERM completed after it").to.be.greaterThan(0);

    // Every call that was answered OK is in the journal.
    const again = await startService("kernel", env);
    const check = new KernelClient(again.endpoints.kernel!);
    try {
      const pending = new Set((await check.listPendingCalls("drain.tool")).map((c) => c.callId));
      for (const r of results.filter((x) => x.ok)) expect(pending.has(`drain-${r.n}`), `drain-${r.n}`).to.equal(true);
      // And no call was journaled but cut off before its answer: a refused call was never begun.
      const cut = results.filter((x) => !x.ok && pending.has(`drain-${x.n}`)).map((x) => x.n);
      expect(cut, "journaled but answered with an error").to.deep.equal([]);
    } finally {
      check.close();
      await again.stop("SIGKILL");
    }
  });

  it("a SIGTERM delivered twice at once (to a process group) still drains and exits 0", async function () {
    const proc = await startService("kernel", serviceEnv());
    const exited = new Promise<number | null>((resolve) => proc.child.once("exit", (code) => resolve(code)));
    proc.child.kill("SIGTERM");
    proc.child.kill("SIGTERM");
    expect(await exited).to.equal(0);
    expect(proc.output()).to.not.contain("second signal");
  });
});

describe("SIGTERM with nobody reading stdout (issue 32, item 4)", function () {
  this.timeout(60_000);
  for (const which of ["ledger", "all"] as const) {
    it(`keycap serve ${which} still exits 0 within its grace when the reader of its stdout has gone`, async () => {
      // sonic-boom's synchronous flush retried a write that failed with EPIPE every 100 ms,
      // for ever: the ledger kept running 40 s and more after SIGTERM.
      const proc = await startService(which, serviceEnv({ KEYCAP_SHUTDOWN_GRACE_MS: "1000" }));
      proc.child.stdout!.destroy();
      await new Promise((r) => setTimeout(r, 200));
      const started = Date.now();
      expect(await proc.stop("SIGTERM", 15_000)).to.equal(0);
      expect(Date.now() - started).to.be.below(10_000);
    });
  }
});
