/**
 * Issue 15: the TypeScript client through a service restart. A call made while the
 * ledger restarts waits for it (nothing is sent before it is up) instead of failing
 * fast and leaving the call to recovery; an already-aborted call is never sent.
 */
import { expect } from "chai";
import { defineTool, KernelClient } from "../clients/ts/src";
import { freePort } from "./support/ports";
import { refusal } from "./support/refusal";
import { serviceEnv, startService } from "./support/processes";

describe("TypeScript client through restarts (issue 15)", function () {
  this.timeout(120_000);

  it("a write issued while the ledger restarts succeeds once it is back, and no call is left pending", async function () {
    const ledgerPort = await freePort();
    const env = serviceEnv({ KEYCAP_LEDGER_LISTEN: `127.0.0.1:${ledgerPort}` });
    const kernel = await startService("kernel", env);
    let ledger = await startService("ledger", { ...env, KEYCAP_KERNEL_ADDRESS: kernel.endpoints.kernel! });
    const client = new KernelClient(kernel.endpoints.kernel!, { ledgerAddress: `127.0.0.1:${ledgerPort}` });
    try {
      const tool = defineTool({ id: "restart.notify", effect: { kind: "unsafe" } });
      await client.registerTool(tool);
      const warm = await client.begin(tool.id, { n: 0 });
      await warm.write("warm"); // the channel is connected
      await warm.complete("succeeded");
      await ledger.stop();
      const h = await client.begin(tool.id, { n: 1 });
      const restarted = new Promise<void>((resolve, reject) =>
        setTimeout(() => {
          startService("ledger", { ...env, KEYCAP_KERNEL_ADDRESS: kernel.endpoints.kernel! }).then((p) => {
            ledger = p;
            resolve();
          }, reject);
        }, 1500),
      );
      const written = await h.write("during the restart", { timeoutMs: 30_000 });
      expect(written.duplicate).to.equal(false);
      await h.complete("succeeded");
      await restarted;
      expect(await client.listPendingCalls(tool.id)).to.deep.equal([]);
    } finally {
      client.close();
      await ledger.stop();
      await kernel.stop();
    }
  });

  it("never sends a call whose AbortSignal is already aborted", async function () {
    const env = serviceEnv();
    const kernel = await startService("kernel", env);
    const client = new KernelClient(kernel.endpoints.kernel!);
    try {
      const tool = defineTool({ id: "abort.notify", effect: { kind: "unsafe" } });
      await client.registerTool(tool);
      const ac = new AbortController();
      ac.abort();
      const e = await refusal(client.beginCall(tool.id, "{}", { signal: ac.signal }));
      expect(e.codeName).to.equal("CANCELLED");
      expect(await client.listPendingCalls(tool.id)).to.deep.equal([]);
    } finally {
      client.close();
      await kernel.stop();
    }
  });

  it("a ledger started before its kernel says why it refuses, and learns the keys as soon as the kernel answers", async function () {
    const kernelPort = await freePort();
    const env = serviceEnv({ KEYCAP_KERNEL_LISTEN: `127.0.0.1:${kernelPort}` });
    const ledger = await startService("ledger", env);
    let kernel: Awaited<ReturnType<typeof startService>> | undefined;
    try {
      // A capability the kernel will sign: its key file is created by the kernel's first start,
      // so begin through a short-lived kernel on another port first.
      const early = await startService("kernel", { ...env, KEYCAP_KERNEL_LISTEN: "127.0.0.1:0" });
      const c0 = new KernelClient(early.endpoints.kernel!, { ledgerAddress: ledger.endpoints.ledger! });
      const tool = defineTool({ id: "late.kernel", effect: { kind: "idempotent", key: { fields: ["/n"] } } });
      await c0.registerTool(tool);
      const h = await c0.begin(tool.id, { n: 1 });
      await early.stop(); // c0 stays open: its ledger channel is what h writes through

      const e = await refusal(h.write("x", { retry: false }));
      expect([e.codeName, e.reason]).to.deep.equal(["UNAVAILABLE", "SIGNING_KEYS_UNAVAILABLE"]);
      expect(e.message).to.not.match(/fetch failed$/);
      expect(e.message).to.match(/GetSigningKeys at 127\.0\.0\.1:\d+/);
      expect(ledger.output()).to.contain("cannot fetch the kernel's signing keys");

      kernel = await startService("kernel", env);
      const up = Date.now();
      const written = await h.write("x", { timeoutMs: 20_000 });
      expect(written.duplicate).to.equal(false);
      expect(Date.now() - up, "keys learned soon after the kernel is up").to.be.below(5000);
      c0.close();
    } finally {
      await kernel?.stop();
      await ledger.stop();
    }
  });
});
