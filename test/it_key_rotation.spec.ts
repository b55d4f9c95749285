import { expect } from "chai";
import { decodeProtectedHeader } from "jose";
import { KernelClient } from "../clients/ts/src";
import { runCli, serviceEnv, startService } from "./support/processes";

describe("signing key rotation without downtime", function () {
  it("after `keycap keys rotate` and SIGHUP the kernel signs with the new key; capabilities of both keys still write", async function () {
    const env = serviceEnv();
    const proc = await startService("all", env);
    const kernel = new KernelClient(proc.endpoints.kernel!, { ledgerAddress: proc.endpoints.ledger! });
    try {
      await kernel.registerTool({ id: "rotate.tool", effect: { kind: "idempotent", key: { fields: ["/n"] } } });
      const before = await kernel.begin("rotate.tool", { n: 1 });
      const oldKid = (await kernel.signingKeys()).currentKeyId;

      const rotated = await runCli(["keys", "rotate"], { KEYCAP_DATA_DIR: env["KEYCAP_DATA_DIR"]! });
      expect(rotated.code, rotated.stderr).to.equal(0);
      proc.child.kill("SIGHUP");
      let newKid = oldKid;
      for (let i = 0; i < 50 && newKid === oldKid; i++) {
        await new Promise((r) => setTimeout(r, 100));
        newKid = (await kernel.signingKeys()).currentKeyId;
      }
      expect(newKid).to.not.equal(oldKid);

      const after = await kernel.beginCall("rotate.tool", '{"n":2}');
      expect(decodeProtectedHeader(after.capability).kid).to.equal(newKid);
      const jwks = JSON.parse((await kernel.signingKeys()).jwksJson) as { keys: { kid: string }[] };
      expect(jwks.keys.map((k) => k.kid)).to.include.members([oldKid, newKid]);

      // The ledger learns the new key id on first sight; the old one stays valid in its grace period.
      expect((await kernel.handleFor(after.call, after.capability, after.capabilityExpiresAt).write("new key")).duplicate).to.equal(false);
      expect((await before.write("old key")).duplicate).to.equal(false);
      expect(proc.child.exitCode, "SIGHUP must not stop the service").to.equal(null);
    } finally {
      kernel.close();
      await proc.stop("SIGKILL");
    }
  });
});
