/**
 * Issue 28, the MCP gateway's policy: validated against its published JSON Schema at start,
 * every problem named by its path; checked against what the upstream really offers
 * (annotations are defaults at most, never trust); and each governed tool's definition held
 * by the kernel, so a changed definition stops the start instead of being merged.
 */
import { expect } from "chai";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { KernelClient } from "../clients/ts/src";
import { startLedgerStack, type LedgerStack } from "./support/ledger-harness";
import { parsePolicy } from "../services/mcp/src";
import { connectHost, COUNTING_SERVER, countingPolicy, writePolicy } from "./support/mcp-host";
import { runCli, TEST_RUNTIME_TOKEN } from "./support/processes";

describe("MCP gateway policy (issue 28): start-time refusals name what to fix", function () {
  this.timeout(60_000);
  let dir: string;
  let stateFile: string;
  let n = 0;

  /** Runs `keycap mcp` on a policy whose counting-upstream tools are `tools`; it must refuse to start. */
  async function refusedStart(tools: string, env: Record<string, string> = {}): Promise<string> {
    const file = writePolicy(dir, `p${++n}.yaml`, countingPolicy(stateFile, tools));
    const r = await runCli(["mcp", "--policy", file], { KEYCAP_DATA_DIR: dir, KEYCAP_RUNTIME_TOKEN: TEST_RUNTIME_TOKEN, ...env });
    expect(r.code, r.stderr).to.equal(2);
    expect(r.stdout, "stdout is the MCP stream: nothing else on it").to.equal("");
    return r.stderr;
  }

  before(function () {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-mcp-policy-"));
    stateFile = path.join(dir, "effects.jsonl");
  });

  after(function () {
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it("refuses a policy that does not fit the schema, naming each problem's path", async function () {
    const err = await refusedStart(
      [
        "      create_order: { class: idempotent }",
        "      send_message: { class: unsafe, key: [/to] }",
        "      get_status: { class: readonly }",
        "      other: { class: idempotent, key: [order_id] }",
      ].join("\n"),
    );
    expect(err).to.include("upstreams.counter.tools.create_order: key is required");
    expect(err).to.include("upstreams.counter.tools.send_message: has a field its class does not take");
    expect(err).to.include("upstreams.counter.tools.get_status.class: must be one of");
    expect(err).to.match(/upstreams\.counter\.tools\.other\.key\.0: .*JSON Pointer/);
  });

  it("refuses an upstream with both a command and a url, or with neither", async function () {
    const file = writePolicy(
      dir,
      "transports.yaml",
      ["version: 1", "upstreams:", "  both: { command: node, url: 'http://127.0.0.1:1/mcp' }", "  neither: { args: [x] }", ""].join("\n"),
    );
    const r = await runCli(["mcp", "--policy", file], { KEYCAP_DATA_DIR: dir });
    expect(r.code, r.stderr).to.equal(2);
    expect(r.stderr).to.include("upstreams.both: give either command (with args, env, cwd) or url, not both");
    expect(r.stderr).to.include("upstreams.neither: give either command (with args, env, cwd) or url");
  });

  it("refuses to start when a tool annotated idempotentHint has no key derivation, saying which arguments to declare", async function () {
    const err = await refusedStart("      send_message: { class: unsafe }");
    expect(err).to.include(
      "upstreams.counter.tools.create_order: the upstream annotates this tool idempotentHint: true, but the policy gives it no key derivation",
    );
    expect(err).to.include('key: ["/order_id", "/amount"]');
    expect(err).to.include("its arguments: order_id, amount, note, hang, delay_ms, decline");
  });

  it("refuses a policy naming a tool the upstream does not have, or a key pointer into an argument its schema does not define", async function () {
    const err = await refusedStart(["      create_order: { class: idempotent, key: [/orderid] }", "      cancel_order: { class: unsafe }"].join("\n"));
    expect(err).to.include(
      'upstreams.counter.tools.cancel_order: upstream counter has no tool "cancel_order" (it has: create_order, send_message, get_status)',
    );
    expect(err).to.include('upstreams.counter.tools.create_order.key[0]: "/orderid" names an argument the tool\'s input schema does not define');
  });

  describe("with a kernel", function () {
    let s: LedgerStack;
    before(async function () {
      s = await startLedgerStack();
    });
    after(async function () {
      await s?.stop();
    });

    it("keycap mcp init writes a starting policy from the upstream's tools/list that the gateway starts with: readOnlyHint tools read, the rest unsafe, an idempotent entry suggested as a comment", async function () {
      const init = await runCli(["mcp", "init", "--name", "inited", "--", process.execPath, COUNTING_SERVER, stateFile], { KEYCAP_DATA_DIR: dir });
      expect(init.code, init.stderr).to.equal(0);
      const policy = parsePolicy(init.stdout);
      expect(Object.fromEntries([...policy.upstreams[0]!.tools].map(([name, t]) => [name, t.class]))).to.deep.equal({
        create_order: "unsafe",
        send_message: "unsafe",
        get_status: "read",
      });
      expect(init.stdout).to.include('# "create_order": { class: idempotent, key: ["/order_id", "/amount"] }');
      expect(init.stdout).to.include("#   annotations: destructiveHint: false, idempotentHint: true");
      const env = { ...s.env, KEYCAP_KERNEL_ADDRESS: s.kernel.endpoints.kernel!, KEYCAP_RUNTIME_TOKEN: TEST_RUNTIME_TOKEN };
      const host = await connectHost(writePolicy(dir, "inited.yaml", init.stdout), env);
      try {
        const { tools } = await host.client.listTools();
        expect(tools.map((t) => [t.name, t._meta?.["io.keycap/effect-class"]])).to.deep.equal([
          ["create_order", "unsafe"],
          ["send_message", "unsafe"],
          ["get_status", "read"],
        ]);
      } finally {
        await host.close();
      }
    });

    it("registers each governed tool with the kernel as mcp:<upstream>/<tool>, and refuses to start when the policy changes a registered definition", async function () {
      const env = { ...s.env, KEYCAP_KERNEL_ADDRESS: s.kernel.endpoints.kernel!, KEYCAP_RUNTIME_TOKEN: TEST_RUNTIME_TOKEN };
      const first = writePolicy(dir, "registered.yaml", countingPolicy(stateFile, "      create_order: { class: idempotent, key: [/order_id] }"));
      const host = await connectHost(first, env);
      await host.close();
      const kernel = new KernelClient(s.kernel.endpoints.kernel!);
      const tool = await kernel.getTool("mcp:counter/create_order").finally(() => kernel.close());
      expect(tool?.effectClass?.kind).to.deep.include({ $case: "idempotent" });
      expect(tool?.effectClass?.kind?.$case === "idempotent" && tool.effectClass.kind.value.key?.fields).to.deep.equal(["/order_id"]);
      expect(JSON.parse(tool!.argumentsSchemaJson)).to.have.nested.property("properties.order_id");
      const err = await refusedStart("      create_order: { class: idempotent, key: [/order_id, /amount] }", env);
      expect(err).to.match(/upstreams\.counter\.tools\.create_order \(mcp:counter\/create_order\): ALREADY_EXISTS [A-Z_]+/);
    });
  });
});
