import { expect } from "chai";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { KernelClient, LedgerClient, KeycapClientError } from "../clients/ts/src";
import { runCli, runCliInTerminal, serviceEnv, startService, TEST_RUNTIME_TOKEN, type ServiceProcess } from "./support/processes";

// eslint-disable-next-line no-control-regex
const ESCAPE = /\u001b\[/;

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

  it("lists the registered tools and shows one with its derivation and owner (issue 33 item 2)", async function () {
    const env = { ...cliEnv(), KEYCAP_KERNEL_ADDRESS: proc.endpoints.kernel! };
    const list = await runCli(["tools"], env);
    expect(list.code, list.stderr).to.equal(0);
    expect(list.stdout).to.include("cli.charge").and.include("idempotent").and.include("/order_id").and.include("local-runtime");
    const shown = await runCli(["tools", "show", "cli.charge", "--json"], env);
    expect(shown.code, shown.stderr).to.equal(0);
    expect(JSON.parse(shown.stdout)).to.deep.include({
      toolId: "cli.charge",
      effectClass: "idempotent",
      keyFields: ["/order_id"],
      derivationVersion: 1,
      contextFields: [],
      owner: "local-runtime",
      grants: [],
    });
    const table = await runCli(["tools", "show", "cli.charge"], env);
    expect(table.stdout).to.match(/key fields\s*│?\s*\/order_id/);
    const missing = await runCli(["tools", "show", "cli.nope"], env);
    expect(missing.code).to.equal(3);
    expect(missing.stderr).to.include("keycap tools lists them");
  });

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
    expect(r.stderr).to.match(/refused the credential \(ADMIN_CREDENTIAL_INVALID\), read from KEYCAP_ADMIN_TOKEN; .*admin-token/);
    expect(r.stderr).to.not.include("wrong");
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
      expect(r.code, bad).to.equal(2); // a usage error (issue 16), not a failure of keycap's
      expect(r.stderr, bad).to.contain("--limit").and.contain("whole number from 1 to 1000");
      expect(r.stderr, bad).to.not.contain("cannot reach");
    }
  });

  it("prints its version (issue 16)", async function () {
    const r = await runCli(["--version"], {});
    expect(r.code).to.equal(0);
    expect(r.stdout.trim()).to.match(/^\d+\.\d+\.\d+/);
  });
  describe("what the next command needs (issue 16)", function () {
    const cli = (args: string[], extra: Record<string, string> = {}) => runCli(args, { ...cliEnv(), ...extra });

    it("prints entry ids, keys and call ids whole, and `entry` takes them as printed", async function () {
      const r = await cli(["entries", "--tool", "cli.charge"]);
      expect(r.code, r.stderr).to.equal(0);
      const [entry] = JSON.parse((await cli(["entries", "--tool", "cli.charge", "--json"])).stdout) as { entryId: string; key: string; callId: string }[];
      expect(key).to.have.length(43);
      for (const id of [entry!.entryId, entry!.key, entry!.callId]) expect(r.stdout, id).to.include(id);
      const byKey = await cli(["entry", entry!.key]);
      expect(byKey.code, byKey.stderr).to.equal(0);
      expect(byKey.stdout).to.include(entry!.entryId).and.include(entry!.callId);
      const byId = await cli(["entry", "--id", entry!.entryId, "--json"]);
      expect((JSON.parse(byId.stdout) as { key: string }).key).to.equal(key);
    });

    it("answers a truncated key with exit 3 and a line saying keys are 43 characters; --json still prints JSON (null)", async function () {
      const cut = `${key.slice(0, 23)}…`;
      const r = await cli(["entry", cut]);
      expect(r.code).to.equal(3);
      expect(r.stdout).to.equal("");
      expect(r.stderr.trim().split("\n")).to.have.length(1);
      expect(r.stderr).to.contain("no entry with key").and.contain("43 characters, this one has 24");
      const j = await cli(["entry", cut, "--json"]);
      expect(j.code).to.equal(3);
      expect(JSON.parse(j.stdout)).to.equal(null);
      expect((JSON.parse(j.stderr) as { error: { reason: string; exitCode: number } }).error).to.include({ reason: "NOT_FOUND", exitCode: 3 });
      const byId = await cli(["entry", "--id", "e_nope", "--json"]);
      expect(byId.code).to.equal(3);
      expect(JSON.parse(byId.stdout)).to.equal(null);
    });

    it("says there are more results and takes the cursor it printed", async function () {
      const h1 = await kernel.begin("cli.charge", { order_id: "C-3" });
      await h1.write("a");
      const h2 = await kernel.begin("cli.charge", { order_id: "C-4" });
      await h2.write("b");
      const first = await cli(["entries", "--tool", "cli.charge", "--limit", "2", "--json"]);
      expect(first.code, first.stderr).to.equal(0);
      const cursor = /^more results: run the same command with --page (\S+)$/m.exec(first.stderr)?.[1];
      expect(cursor, first.stderr).to.be.a("string");
      const next = await cli(["entries", "--tool", "cli.charge", "--limit", "2", "--json", "--page", cursor!]);
      expect(next.code, next.stderr).to.equal(0);
      expect(next.stderr).to.not.contain("more results");
      const seen = [...(JSON.parse(first.stdout) as { key: string }[]), ...(JSON.parse(next.stdout) as { key: string }[])].map((e) => e.key);
      expect(new Set(seen)).to.deep.equal(new Set([key, h1.key, h2.key]));
    });

    it("writes no colour codes into a pipe, colours a terminal, and honours NO_COLOR there", async function () {
      const piped = await cli(["entries", "--tool", "cli.charge"]);
      expect(piped.stdout).to.include("cli.charge");
      expect(piped.stdout).to.not.match(ESCAPE);
      const tty = await runCliInTerminal(["entries", "--tool", "cli.charge"], cliEnv());
      expect(tty.code, tty.output).to.equal(0);
      expect(tty.output).to.include("cli.charge").and.match(ESCAPE);
      const noColour = await runCliInTerminal(["entries", "--tool", "cli.charge"], { ...cliEnv(), NO_COLOR: "1" });
      expect(noColour.code, noColour.output).to.equal(0);
      expect(noColour.output).to.include("cli.charge").and.not.match(ESCAPE);
    });

    it("fits a table to a real terminal's width (90 columns: no line wider), and a terminal that reports no width (0) gets the table a pipe gets", async function () {
      const plain = (s: string): string => s.replace(/\u001b\[[0-9;]*m/g, "").replace(/\r/g, "");
      const table = (s: string): string[] =>
        plain(s)
          .split("\n")
          .filter((l) => /^[┌│├└]/.test(l));
      const widest = (lines: string[]): number => Math.max(...lines.map((l) => [...l].length));
      const args = ["tools"];
      const env = { ...cliEnv(), KEYCAP_KERNEL_ADDRESS: proc.endpoints.kernel! };
      const piped = table((await runCli(args, env)).stdout);
      expect(widest(piped)).to.be.within(91, 120);
      const narrow = await runCliInTerminal(args, env, 30_000, { columns: 90 });
      expect(narrow.code, narrow.output).to.equal(0);
      expect(widest(table(narrow.output))).to.be.at.most(90);
      expect(plain(narrow.output)).to.include("cli.charge");
      // A pty without a size (script, some CI runners, docker exec before a resize) says 0 columns.
      const sizeless = await runCliInTerminal(args, env, 30_000);
      expect(sizeless.code, sizeless.output).to.equal(0);
      expect(table(sizeless.output)).to.deep.equal(piped);
    });

    it("refuses bad option values as usage errors (exit 2, one line), before calling anything", async function () {
      for (const args of [
        ["rejections", "--since", "yesterday", "--admin", "127.0.0.1:1"],
        ["rejections", "--service", "both", "--admin", "127.0.0.1:1"],
        ["entries", "--limit", "-5", "--admin", "127.0.0.1:1"],
        ["entry", "--admin", "127.0.0.1:1"],
        ["calls", "--state", "done", "--kernel", "127.0.0.1:1"],
        ["complete", "c-1", "--outcome", "maybe", "--kernel", "127.0.0.1:1"],
      ]) {
        const r = await runCli(args, { KEYCAP_ADMIN_TOKEN: TOKEN });
        expect(r.code, `${args.join(" ")}: ${r.stderr}`).to.equal(2);
        expect(r.stderr, args.join(" "))
          .to.match(/^keycap: /)
          .and.not.contain("cannot reach");
        expect(r.stderr.trim().split("\n"), args.join(" ")).to.have.length(1);
      }
    });

    it("names the address and the setting it came from when nothing answers, and prints JSON null with --json", async function () {
      const [plain, json] = await Promise.all([
        runCli(["stats"], { KEYCAP_ADMIN_TOKEN: TOKEN, KEYCAP_ADMIN_ADDRESS: "127.0.0.1:1" }),
        runCli(["stats", "--json", "--admin", "127.0.0.1:1"], { KEYCAP_ADMIN_TOKEN: TOKEN }),
      ]);
      expect(plain.code).to.equal(1);
      expect(plain.stderr.trim()).to.match(/^keycap: cannot reach the ledger admin API at 127\.0\.0\.1:1 \(setting KEYCAP_ADMIN_ADDRESS\): /);
      expect(plain.stderr).to.not.match(/refused|Waiting for LB pick/);
      expect(json.code).to.equal(1);
      expect(JSON.parse(json.stdout)).to.equal(null);
      const err = (JSON.parse(json.stderr) as { error: { message: string; code: string } }).error;
      expect(err.message).to.contain("(setting --admin)");
      expect(err.code).to.be.oneOf(["UNAVAILABLE", "DEADLINE_EXCEEDED"]);
    });

    it("does not print a status code twice (the admin command pointed at the kernel)", async function () {
      const r = await cli(["stats"], { KEYCAP_ADMIN_ADDRESS: proc.endpoints.kernel! });
      expect(r.code).to.equal(1);
      expect(r.stderr).to.contain(proc.endpoints.kernel!);
      expect(r.stderr).to.not.match(/\b([A-Z_]{4,}) \1\b/);
    });

    it("finds the data directory's admin credential from a subfolder, as the services find the data directory", async function () {
      const top = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-cli-cwd-"));
      fs.mkdirSync(path.join(top, ".keycap"));
      fs.writeFileSync(path.join(top, ".keycap", "admin-token"), TOKEN + "\n", { mode: 0o600 });
      const sub = path.join(top, "docs", "notes");
      fs.mkdirSync(sub, { recursive: true });
      try {
        const r = await runCli(["stats", "--json"], { KEYCAP_ADMIN_ADDRESS: proc.endpoints.admin! }, 30000, { cwd: sub });
        expect(r.code, r.stderr).to.equal(0);
        expect((JSON.parse(r.stdout) as { entries: number }).entries).to.be.at.least(1);
      } finally {
        fs.rmSync(top, { recursive: true, force: true });
      }
    });
  });

  describe("keycap recover without handlers (issue 16)", function () {
    it("leaves a Queryable call it cannot retry at its attempt, run after run, and still settles one the ledger holds", async function () {
      await kernel.registerTool({ id: "cli.lookup", effect: { kind: "queryable", requestIdField: "/request" } });
      const open = await kernel.beginCall("cli.lookup", '{"request":"r-open"}');
      const held = await kernel.begin("cli.lookup", { request: "r-held" });
      await held.write("done before the crash");
      const env = { KEYCAP_KERNEL_ADDRESS: proc.endpoints.kernel!, KEYCAP_LEDGER_ADDRESS: proc.endpoints.ledger!, KEYCAP_RUNTIME_TOKEN: TEST_RUNTIME_TOKEN };
      type Step = { callId: string; attempt: number; result: string };
      for (let run = 1; run <= 3; run++) {
        const r = await runCli(["recover", "--tool", "cli.lookup", "--json"], env);
        expect(r.code, r.stderr).to.equal(0);
        const steps = JSON.parse(r.stdout) as Step[];
        expect(
          steps.find((s) => s.callId === open.call!.callId),
          `run ${run}`,
        ).to.include({ attempt: 1, result: "skipped" });
        if (run === 1) expect(steps.find((s) => s.callId === held.callId)).to.include({ result: "done-in-ledger" });
      }
      const [pending] = (await kernel.listPendingCalls("cli.lookup")).filter((c) => c.callId === open.call!.callId);
      expect(pending?.attempt).to.equal(1);
    });
  });

  describe("keycap keys rotate (issue 16)", function () {
    it("names the running kernel's pid, and --reload makes it sign with the new key", async function () {
      const env = { KEYCAP_DATA_DIR: proc.env["KEYCAP_DATA_DIR"]! };
      const told = await runCli(["keys", "rotate"], env);
      expect(told.code, told.stderr).to.equal(0);
      expect(told.stdout).to.contain(`kill -HUP ${proc.child.pid}`);
      const r = await runCli(["keys", "rotate", "--reload"], env);
      expect(r.code, r.stderr).to.equal(0);
      const kid = /current key id (\S+)/.exec(r.stdout)?.[1];
      expect(r.stdout).to.contain(`kernel pid ${proc.child.pid} at ${proc.endpoints.kernel} now signs with ${kid}`);
      expect((await kernel.signingKeys()).currentKeyId).to.equal(kid);
    });

    it("--reload refuses, signalling nothing, when no kernel runs with the data directory", async function () {
      const empty = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-cli-nokernel-"));
      try {
        const r = await runCli(["keys", "rotate", "--reload"], { KEYCAP_DATA_DIR: empty });
        expect(r.code).to.equal(1);
        expect(r.stderr).to.contain(`no kernel.pid in ${empty}`);
        expect(fs.existsSync(path.join(empty, "signing-keys.json")), "rotated anyway").to.equal(false);
      } finally {
        fs.rmSync(empty, { recursive: true, force: true });
      }
    });
  });
});
