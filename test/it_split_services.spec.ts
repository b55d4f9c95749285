/**
 * Issue 16: kernel and ledger run as separate processes (`keycap serve kernel`,
 * `keycap serve ledger`), the way a deployment that scales them apart runs them.
 */
import { expect } from "chai";
import { defineTool, KernelClient } from "../clients/ts/src";
import { healthCheck } from "./support/grpc-probes";
import { freePort } from "./support/ports";
import { refusal } from "./support/refusal";
import { serviceEnv, startService } from "./support/processes";

describe("kernel and ledger as separate processes (issue 16)", function () {
  this.timeout(120_000);

  it("a ledger started before its kernel refuses with UNAVAILABLE naming the cause, and the first write after the kernel is healthy succeeds within a second", async function () {
    const kernelPort = await freePort();
    const env = serviceEnv({ KEYCAP_KERNEL_LISTEN: `127.0.0.1:${kernelPort}` });
    const ledger = await startService("ledger", env);
    let kernel: Awaited<ReturnType<typeof startService>> | undefined;
    const early = await startService("kernel", { ...env, KEYCAP_KERNEL_LISTEN: "127.0.0.1:0" });
    // A capability signed with the key the real kernel will publish (same data directory):
    // minted by a short-lived kernel on another port, which the ledger never asks.
    const c0 = new KernelClient(early.endpoints.kernel!, { ledgerAddress: ledger.endpoints.ledger! });
    try {
      const tool = defineTool({ id: "split.late-kernel", effect: { kind: "idempotent", key: { fields: ["/n"] } } });
      await c0.registerTool(tool);
      const first = await c0.begin(tool.id, { n: 1 });
      const second = await c0.begin(tool.id, { n: 2 });
      await early.stop();

      const e = await refusal(first.write("x", { retry: false }));
      expect([e.codeName, e.reason]).to.deep.equal(["UNAVAILABLE", "SIGNING_KEYS_UNAVAILABLE"]);
      // The real cause (the kernel's port refuses connections), not a bare "fetch failed".
      expect(e.message).to.match(new RegExp(`127\\.0\\.0\\.1:${kernelPort}.*ECONNREFUSED`));
      expect(ledger.output()).to.contain("cannot fetch the kernel's signing keys");
      expect(ledger.output()).to.contain("ECONNREFUSED");

      kernel = await startService("kernel", env);
      expect(await healthCheck(`127.0.0.1:${kernelPort}`)).to.equal("SERVING");
      const healthyAt = Date.now();
      // No client retries: the ledger itself must know the keys (or fetch them) by now.
      const written = await second.write("y", { retry: false, timeoutMs: 5000 });
      expect(written.duplicate).to.equal(false);
      expect(Date.now() - healthyAt, "first write after the kernel is healthy").to.be.below(1000);
      const again = await first.write("x", { retry: false });
      expect(again.duplicate).to.equal(false);
    } finally {
      c0.close();
      await early.stop();
      await kernel?.stop();
      await ledger.stop();
    }
  });
});
