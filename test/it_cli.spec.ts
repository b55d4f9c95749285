import { expect } from "chai";
import { KernelClient, LedgerClient, KeycapClientError } from "../clients/ts/src";
import { runCli, serviceEnv, startService, type ServiceProcess } from "./support/processes";

const TOKEN = "cli-test-admin-token-abcdefghijklmnop";

describe("keycap CLI: operators read the ledger through the admin API", function () {
  let proc: ServiceProcess;
  let env: Record<string, string>;
  let kernel: KernelClient;
  let key = "";

  before(async function () {
    env = serviceEnv({ KEYCAP_ADMIN_TOKEN: TOKEN });
    proc = await startService("all", env);
    kernel = new KernelClient(proc.endpoints.kernel!, { ledgerAddress: proc.endpoints.ledger! });
    await kernel.registerTool({ id: "cli.charge", effect: { kind: "idempotent", key: { fields: ["/order_id"] } } });
    const h = await kernel.begin("cli.charge", { order_id: "C-1" });
    key = h.key;
    await h.write("charged");
    // A misbehaving write: the capability is valid, the key is not the kernel's.
    const begun = await kernel.beginCall("cli.charge", '{"order_id":"C-2"}');
    const ledger = new LedgerClient(proc.endpoints.ledger!);
    const err = await ledger
      .writeWithCapability(begun.capability, { key: "not-the-kernels-key", payload: Buffer.from("x") })
      .catch((e: unknown) => KeycapClientError.from(e));
    expect((err as KeycapClientError).reason).to.equal("KEY_MISMATCH");
    ledger.close();
  });

  after(async function () {
    kernel?.close();
    await proc?.stop("SIGKILL").catch(() => undefined);
  });

  const cliEnv = (): Record<string, string> => ({ KEYCAP_ADMIN_TOKEN: TOKEN, KEYCAP_ADMIN_ADDRESS: proc.endpoints.admin! });

  it("prints the rejections for a tool as a table", async function () {
    const r = await runCli(["rejections", "--tool", "cli.charge"], cliEnv());
    expect(r.code, r.stderr).to.equal(0);
    expect(r.stdout).to.include("cli.charge");
    expect(r.stdout).to.include("KEY_MISMATCH");
    expect(r.stdout).to.include("PERMISSION_DENIED");
  });

  it("prints them as JSON with --json, filtered by reason", async function () {
    const r = await runCli(["rejections", "--tool", "cli.charge", "--reason", "KEY_MISMATCH", "--since", "1h", "--json"], cliEnv());
    expect(r.code, r.stderr).to.equal(0);
    const rows = JSON.parse(r.stdout) as { toolId: string; reason: string; toolIdVerified: boolean; attemptedKey: string }[];
    expect(rows).to.have.length(1);
    expect(rows[0]).to.include({ toolId: "cli.charge", reason: "KEY_MISMATCH", toolIdVerified: true, attemptedKey: "not-the-kernels-key" });
  });

  it("shows entries, one entry by key, and stats", async function () {
    const entries = await runCli(["entries", "--tool", "cli.charge", "--json"], cliEnv());
    expect((JSON.parse(entries.stdout) as { key: string }[]).map((e) => e.key)).to.deep.equal([key]);
    const entry = await runCli(["entry", key], cliEnv());
    expect(entry.code).to.equal(0);
    expect(entry.stdout).to.include("cli.charge");
    const stats = await runCli(["stats", "--json"], cliEnv());
    const s = JSON.parse(stats.stdout) as { entries: number; rejections: number; rejectionsByReason: Record<string, number> };
    expect(s.entries).to.equal(1);
    expect(s.rejectionsByReason["KEY_MISMATCH"]).to.equal(1);
  });

  it("exits non-zero with one line when the credential is wrong", async function () {
    const r = await runCli(["rejections", "--tool", "cli.charge"], { ...cliEnv(), KEYCAP_ADMIN_TOKEN: "wrong" });
    expect(r.code).to.equal(1);
    expect(r.stdout).to.equal("");
    expect(r.stderr.trim().split("\n")).to.have.length(1);
    expect(r.stderr).to.match(/refused the credential \(ADMIN_CREDENTIAL_INVALID\)/);
  });

  it("exits non-zero with one line when the ledger is unreachable", async function () {
    const r = await runCli(["stats"], { KEYCAP_ADMIN_TOKEN: TOKEN, KEYCAP_ADMIN_ADDRESS: "127.0.0.1:1" });
    expect(r.code).to.equal(1);
    expect(r.stderr.trim().split("\n")).to.have.length(1);
    expect(r.stderr).to.match(/cannot reach the ledger admin API at 127\.0\.0\.1:1/);
  });

  it("answers --help with every command (npx keycap --help)", async function () {
    const r = await runCli(["--help"], {});
    expect(r.code).to.equal(0);
    for (const c of ["serve", "rejections", "entries", "entry", "stats", "recover", "keys", "principals", "grants"]) expect(r.stdout).to.include(c);
  });

  it("refuses a numeric option that is not a number as a usage error, before calling anything (issue 14)", async function () {
    for (const bad of ["abc", "0", "1.5", "1e3", "100000"]) {
      const r = await runCli(["rejections", "--limit", bad, "--admin", "127.0.0.1:1"], {});
      expect(r.code, bad).to.equal(1);
      expect(r.stderr, bad).to.contain("--limit").and.contain("whole number from 1 to 1000");
      expect(r.stderr, bad).to.not.contain("cannot reach");
    }
  });

  it("prints its version (issue 16)", async function () {
    const r = await runCli(["--version"], {});
    expect(r.code).to.equal(0);
    expect(r.stdout.trim()).to.match(/^\d+\.\d+\.\d+/);
  });
});
