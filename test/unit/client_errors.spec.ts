import { expect } from "chai";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { KernelClient, KeycapClientError, LedgerClient, lookupRuntimeToken, missingCredentialHint } from "../../clients/ts/src";
import { freePort } from "../support/ports";

async function refusal(p: Promise<unknown>): Promise<KeycapClientError> {
  try {
    await p;
  } catch (err) {
    return KeycapClientError.from(err);
  }
  throw new Error("expected a refusal");
}

describe("the TypeScript client's errors name the fix (issue 33 items 1 and 3)", function () {
  let top: string;
  beforeEach(() => {
    top = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "keycap-client-errors-")));
  });
  afterEach(() => fs.rmSync(top, { recursive: true, force: true }));

  it("finds .keycap/runtime-token from a nested subfolder", function () {
    fs.mkdirSync(path.join(top, ".keycap"));
    fs.writeFileSync(path.join(top, ".keycap", "runtime-token"), "keycap_rt_above\n");
    const sub = path.join(top, "app", "src", "deep");
    fs.mkdirSync(sub, { recursive: true });
    const found = lookupRuntimeToken({}, sub);
    expect(found.token).to.equal("keycap_rt_above");
    expect(found.source).to.equal(path.join(top, ".keycap", "runtime-token"));
  });

  it("without one, says which settings and folders it tried and what would supply one", function () {
    const sub = path.join(top, "app", "deep");
    fs.mkdirSync(sub, { recursive: true });
    // A .keycap above `top` (say in $HOME) would be found: the trail then ends there.
    const found = lookupRuntimeToken({}, sub);
    if (found.token !== undefined) this.skip();
    const hint = missingCredentialHint({}, sub);
    for (const want of [
      "KEYCAP_RUNTIME_TOKEN (not set)",
      "KEYCAP_RUNTIME_TOKEN_FILE (not set)",
      "KEYCAP_DATA_DIR (not set)",
      sub,
      path.join(top, "app"),
      top,
      "token option",
    ]) {
      expect(hint).to.contain(want);
    }
    const configured = missingCredentialHint({ KEYCAP_DATA_DIR: path.join(top, "data") }, sub);
    expect(configured)
      .to.contain(`KEYCAP_DATA_DIR=${path.join(top, "data")}`)
      .and.contain(path.join(top, "data", "runtime-token") + " (no such file)");
  });

  it("names the kernel's and the ledger's address and setting when nothing listens there, keeping the code", async function () {
    const port = await freePort();
    const address = `127.0.0.1:${port}`;
    const kernel = new KernelClient(address, { token: "keycap_rt_x", coalesce: false });
    const ledger = new LedgerClient(address);
    try {
      const k = await refusal(kernel.listTools({ timeoutMs: 1500 }));
      expect(k.codeName).to.be.oneOf(["UNAVAILABLE", "DEADLINE_EXCEEDED"]);
      expect(k.reason).to.equal(k.codeName);
      expect(k.message)
        .to.contain(`keycap kernel at ${address} could not be reached`)
        .and.contain("new KernelClient(address)")
        .and.contain("KEYCAP_KERNEL_ADDRESS");
      expect(k.message).to.contain("1.5 s");
      const l = await refusal(ledger.lookupWithCapability("cap", "r", { timeoutMs: 1500 }));
      expect(l.codeName).to.be.oneOf(["UNAVAILABLE", "DEADLINE_EXCEEDED"]);
      expect(l.message).to.contain(`keycap ledger at ${address} could not be reached`).and.contain("ledgerAddress").and.contain("KEYCAP_LEDGER_ADDRESS");
    } finally {
      kernel.close();
      ledger.close();
    }
  });
});
