/**
 * Issue 28: the host side driven by the official Python SDK (`mcp` 2.3, ClientSession over
 * stdio) as well as the TypeScript one: `keycap mcp` offers the upstream's tools, 20 concurrent
 * identical calls of an Idempotent tool reach the upstream once and get one result, and a call
 * missing its key field is an MCP error whose data carries keycap's reason.
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { startLedgerStack, type LedgerStack } from "./support/ledger-harness";
import { readEvents } from "./support/counting-mcp-server";
import { countingPolicy, writePolicy } from "./support/mcp-host";
import { CLI_ENTRY, TEST_RUNTIME_TOKEN } from "./support/processes";
import { ensurePythonMcp } from "./support/python-mcp";

interface HostReport {
  tools: string[];
  texts: string[];
  replays: boolean[];
  refusal: { code: number; data: { reason?: string; tool_id?: string } } | null;
}

describe("MCP gateway driven by the Python SDK (issue 28)", function () {
  this.timeout(300_000);
  let s: LedgerStack;
  let dir: string;
  let python: string;

  before(async function () {
    python = ensurePythonMcp();
    s = await startLedgerStack();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-mcp-py-"));
  });

  after(async function () {
    await s?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it("gives 20 concurrent identical calls from a Python ClientSession one upstream effect and one result, and refuses a call missing its key field with keycap's reason (ARGUMENTS_SCHEMA_VIOLATION: the input schema requires it)", function () {
    const stateFile = path.join(dir, "effects.jsonl");
    const policy = writePolicy(dir, "policy.yaml", countingPolicy(stateFile, "      create_order: { class: idempotent, key: [/order_id] }", "py"));
    const env = {
      PATH: process.env["PATH"] ?? "",
      HOME: process.env["HOME"] ?? "",
      ...s.env,
      KEYCAP_KERNEL_ADDRESS: s.kernel.endpoints.kernel!,
      KEYCAP_RUNTIME_TOKEN: TEST_RUNTIME_TOKEN,
    };
    const r = spawnSync(python, [path.resolve("test/python/mcp_host.py"), process.execPath, CLI_ENTRY, policy, "o-python"], {
      env,
      encoding: "utf8",
      timeout: 120_000,
    });
    expect(r.status, r.stderr).to.equal(0);
    const report = JSON.parse(r.stdout.trim().split("\n").pop() ?? "{}") as HostReport;
    expect(report.tools).to.deep.equal(["create_order", "send_message", "get_status"]);
    expect(report.texts).to.have.length(1);
    expect(JSON.parse(report.texts[0]!)).to.deep.equal([{ type: "text", text: "order o-python created as effect #1" }]);
    expect(report.replays.filter((x) => x)).to.have.length(19);
    // The upstream's input schema requires order_id, so the kernel's schema check names it first.
    expect(report.refusal?.data).to.deep.include({ reason: "ARGUMENTS_SCHEMA_VIOLATION", tool_id: "mcp:py/create_order" });
    const requests = readEvents(stateFile).filter((e) => e.event === "request" && e.args["order_id"] === "o-python");
    expect(requests).to.have.length(1);
  });
});
