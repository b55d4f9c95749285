/**
 * Issue 28 with the published reference MCP servers as upstreams, unmodified:
 * `@modelcontextprotocol/server-filesystem` and `@modelcontextprotocol/server-memory`
 * (pinned devDependencies) behind one `keycap mcp`, tools prefixed per upstream.
 * `write_file`, declared idempotent on path and content, is sent once; `move_file`, declared
 * unsafe, in flight when the gateway is SIGKILLed, is not sent again on the host's retry.
 */
import { expect } from "chai";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { MongoClient } from "mongodb";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { startLedgerStack, type LedgerStack } from "./support/ledger-harness";
import { connectHost, writePolicy, type McpHost } from "./support/mcp-host";
import { TEST_RUNTIME_TOKEN } from "./support/processes";

const FS_SERVER = path.resolve("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
const MEMORY_SERVER = path.resolve("node_modules/@modelcontextprotocol/server-memory/dist/index.js");

describe("MCP gateway (issue 28) in front of the reference servers server-filesystem and server-memory", function () {
  this.timeout(90_000);
  let s: LedgerStack;
  let dir: string;
  let root: string;
  let policyFile: string;
  let env: Record<string, string>;
  let host: McpHost | undefined;
  let mongo: MongoClient;

  const text = (r: CallToolResult): string => r.content.map((c) => (c.type === "text" ? c.text : "")).join("");
  const call = (h: McpHost, name: string, args: Record<string, unknown>): Promise<CallToolResult> =>
    h.client.callTool({ name, arguments: args }, undefined, { timeout: 30_000 }) as Promise<CallToolResult>;

  before(async function () {
    s = await startLedgerStack();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-mcp-ref-"));
    root = fs.realpathSync(fs.mkdtempSync(path.join(dir, "files-")));
    policyFile = writePolicy(
      dir,
      "policy.yaml",
      [
        "version: 1",
        "upstreams:",
        "  fs:",
        `    command: ${JSON.stringify(process.execPath)}`,
        `    args: [${JSON.stringify(FS_SERVER)}, ${JSON.stringify(root)}]`,
        "    tools:",
        "      write_file: { class: idempotent, key: [/path, /content] }",
        "      create_directory: { class: idempotent, key: [/path] }",
        "      move_file: { class: unsafe }",
        "      read_text_file: { class: read }",
        "  memory:",
        `    command: ${JSON.stringify(process.execPath)}`,
        `    args: [${JSON.stringify(MEMORY_SERVER)}]`,
        `    env: { MEMORY_FILE_PATH: ${JSON.stringify(path.join(dir, "memory.jsonl"))} }`,
        "    tools:",
        "      delete_entities: { class: idempotent, key: [/entityNames] }",
        "      delete_observations: { class: idempotent, key: [/deletions] }",
        "      delete_relations: { class: idempotent, key: [/relations] }",
        "      read_graph: { class: read }",
        "      search_nodes: { class: read }",
        "      open_nodes: { class: read }",
        "",
      ].join("\n"),
    );
    env = { ...s.env, KEYCAP_KERNEL_ADDRESS: s.kernel.endpoints.kernel!, KEYCAP_RUNTIME_TOKEN: TEST_RUNTIME_TOKEN, KEYCAP_MCP_TIMEOUT_MS: "5000" };
    mongo = await MongoClient.connect(s.env["MONGODB_URI"]!);
  });

  afterEach(async function () {
    if (this.currentTest?.state === "failed" && host) console.error(host.stderr().split("\n").slice(-30).join("\n"));
    await host?.close().catch(() => undefined);
    host = undefined;
  });

  after(async function () {
    await mongo?.close();
    await s?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it("offers both upstreams' tools prefixed with the upstream's name, and passes read tools through", async function () {
    host = await connectHost(policyFile, env);
    const names = (await host.client.listTools()).tools.map((t) => t.name);
    expect(names).to.include.members(["fs__write_file", "fs__move_file", "memory__create_entities", "memory__read_graph"]);
    await call(host, "memory__create_entities", { entities: [{ name: "keycap", entityType: "project", observations: ["enforces idempotency"] }] });
    const graph = await call(host, "memory__read_graph", {});
    expect(text(graph)).to.include("enforces idempotency");
  });

  it("sends write_file (idempotent on path and content) once: a repeat gets the stored result and does not write again", async function () {
    host = await connectHost(policyFile, env);
    const file = path.join(root, "notes.txt");
    const first = await call(host, "fs__write_file", { path: file, content: "hello from keycap\n" });
    expect(first.isError).to.not.equal(true);
    expect(fs.readFileSync(file, "utf8")).to.equal("hello from keycap\n");
    // Were the repeat sent, the server would write the content again over this.
    fs.writeFileSync(file, "changed since\n");
    const again = await call(host, "fs__write_file", { path: file, content: "hello from keycap\n" });
    expect(again._meta?.["io.keycap/replay"]).to.equal(true);
    expect(again.content).to.deep.equal(first.content);
    expect(fs.readFileSync(file, "utf8")).to.equal("changed since\n");
  });

  it("does not send move_file (unsafe) again when the host retries after the gateway was SIGKILLed with it in flight", async function () {
    const h = await connectHost(policyFile, env);
    host = h;
    const from = path.join(root, "draft.txt");
    const to = path.join(root, "final.txt");
    fs.writeFileSync(from, "draft\n");
    const upstreamPid = Number(/"upstream":"fs".*?"upstreamPid":(\d+)/.exec(h.stderr())?.[1]);
    expect(upstreamPid).to.be.greaterThan(0);
    // The upstream holds the request unread until the gateway is gone: the answer is lost, the effect is not.
    process.kill(upstreamPid, "SIGSTOP");
    const lost = call(h, "fs__move_file", { source: from, destination: to }).catch((err: unknown) => err);
    const slots = mongo.db(s.env["KEYCAP_MONGODB_DATABASE"]).collection<{ _id: string; tool_id: string; state: string }>("mcp_results");
    for (let i = 0; !(await slots.findOne({ tool_id: "mcp:fs/move_file", state: "sending" })); i++) {
      if (i > 200) throw new Error("the gateway never claimed the move_file call");
      await new Promise((r) => setTimeout(r, 25));
    }
    await new Promise((r) => setTimeout(r, 200));
    const killed = h.kill();
    // Let the upstream go on: it reads the request (the effect happens), and its answer has nowhere to go.
    process.kill(upstreamPid, "SIGCONT");
    await killed;
    await lost;
    for (let i = 0; !fs.existsSync(to); i++) {
      if (i > 200) throw new Error("the upstream never moved the file");
      await new Promise((r) => setTimeout(r, 25));
    }
    host = await connectHost(policyFile, env);
    const retried = await call(host, "fs__move_file", { source: from, destination: to });
    expect(retried.isError).to.equal(true);
    expect(text(retried))
      .to.match(/not sent/)
      .and.match(/keycap recover/);
    expect(fs.readFileSync(to, "utf8")).to.equal("draft\n");
    const slot = await slots.findOne({ tool_id: "mcp:fs/move_file" });
    expect(slot?.state).to.equal("indeterminate");
  });
});
