/**
 * Issue 29, TypeScript: a keycap-aware MCP server (the example, services/sink/examples/
 * mcp-charge-server.ts, on McpSink) behind the real `keycap mcp` and kernel. Through the gateway
 * a charge succeeds and the Stripe-like API sees the kernel's key; sent to the server directly,
 * a call without a capability, with one for other arguments, an expired one, another tool's,
 * one without a derivation, and an Unsafe one used again are each refused before any handler
 * runs, and each refusal is listed by `keycap rejections --service sink:payments` with the tool id.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { expect } from "chai";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpError, type CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { connectMongo, type MongoConnection } from "../services/common/src/mongo";
import { createLogger } from "../services/common/src/logger";
import type { RejectionAudit } from "../services/common/src/rejection-audit";
import { KernelKeySource, McpSink, MongoSpentStore, openSinkRefusalStore, type KeycapErrorData } from "../services/sink/src";
import { startChargeApi, type ChargeApi } from "../services/sink/examples/charge-api";
import { createChargeServer, GOVERNED, type ChargeServer } from "../services/sink/examples/mcp-charge-server";
import { startLedgerStack, type LedgerStack } from "./support/ledger-harness";
import { connectHost, writePolicy, type McpHost } from "./support/mcp-host";
import { runCli, TEST_RUNTIME_TOKEN } from "./support/processes";

const EXAMPLE = path.resolve(process.cwd(), "dist/services/sink/examples/mcp-charge-server.js");
const CHARGE = "mcp:payments/charge";
const RECEIPT = "mcp:payments/send_receipt";

describe("keycap-aware MCP server in TypeScript (issue 29): the capability verified inside the server", function () {
  this.timeout(120_000);
  let s: LedgerStack;
  let api: ChargeApi;
  let dir: string;
  let host: McpHost | undefined;
  let mongo: MongoConnection;
  let keys: KernelKeySource;
  let refusals: RejectionAudit;
  let direct: ChargeServer;
  let client: Client;

  before(async function () {
    s = await startLedgerStack();
    api = await startChargeApi();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-mcp-server-ts-"));
    const policy = examplePolicy("payments");
    // The gateway registers mcp:payments/* with the kernel as it starts.
    host = await connectHost(policy, {
      ...s.env,
      KEYCAP_KERNEL_ADDRESS: s.kernel.endpoints.kernel!,
      KEYCAP_RUNTIME_TOKEN: TEST_RUNTIME_TOKEN,
      KEYCAP_MCP_TIMEOUT_MS: "10000",
    });

    // The same server, reached directly (no gateway): in process, so its handler calls can be counted.
    mongo = await connectMongo(s.env["MONGODB_URI"]!, s.env["KEYCAP_MONGODB_DATABASE"]!, 5000);
    keys = new KernelKeySource(s.kernel.endpoints.kernel!);
    refusals = await openSinkRefusalStore(mongo.db, "payments", createLogger("mcp-server-test", "warn"));
    const sink = new McpSink({ name: "payments", tools: GOVERNED, keys, spentStore: await MongoSpentStore.open(mongo.db, { sweepIntervalMs: 0 }), refusals });
    direct = createChargeServer(api.url);
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await direct.server.connect(sink.guard(serverSide));
    client = new Client({ name: "direct-client", version: "1.0.0" });
    await client.connect(clientSide);
  });

  after(async function () {
    await client?.close().catch(() => undefined);
    await host?.close().catch(() => undefined);
    await refusals?.close();
    keys?.close();
    await mongo?.client.close();
    await api?.close();
    await s?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  /** A gateway policy running the example server as the upstream `name` (it governs mcp:payments/* whatever the name). */
  function examplePolicy(name: string): string {
    const serverEnv = {
      CHARGE_API_URL: api.url,
      KEYCAP_KERNEL_ADDRESS: s.kernel.endpoints.kernel!,
      MONGODB_URI: s.env["MONGODB_URI"]!,
      KEYCAP_MONGODB_DATABASE: s.env["KEYCAP_MONGODB_DATABASE"]!,
    };
    const lines = [
      "version: 1",
      "upstreams:",
      `  ${name}:`,
      `    command: ${JSON.stringify(process.execPath)}`,
      `    args: [${JSON.stringify(EXAMPLE)}]`,
      `    env: ${JSON.stringify(serverEnv)}`,
      "    tools:",
      "      charge: { class: idempotent, key: [/order_id, /amount_cents] }",
      "      send_receipt: { class: unsafe }",
      "",
    ];
    return writePolicy(dir, `${name}.yaml`, lines.join("\n"));
  }

  function callDirect(name: string, args: Record<string, unknown>, capability?: string): Promise<CallToolResult> {
    return client.callTool({
      name,
      arguments: args,
      ...(capability !== undefined ? { _meta: { "io.keycap/capability": capability } } : {}),
    }) as Promise<CallToolResult>;
  }

  async function refusal(p: Promise<unknown>): Promise<KeycapErrorData> {
    const err = await p.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err, "expected a refusal").to.be.instanceOf(McpError);
    return (err as McpError).data as KeycapErrorData;
  }

  it("charges through the gateway once, and the API sees the kernel's key as Idempotency-Key", async function () {
    const args = { order_id: "ord-1", amount_cents: 1250 };
    const first = (await host!.client.callTool({ name: "charge", arguments: args })) as CallToolResult;
    expect(first.isError, JSON.stringify(first)).to.not.equal(true);
    const key = first._meta?.["io.keycap/idempotency-key"];
    expect(key).to.be.a("string");
    expect(api.charges.map((c) => [c.orderId, c.idempotencyKey])).to.deep.equal([["ord-1", key]]);
    const again = (await host!.client.callTool({ name: "charge", arguments: args })) as CallToolResult;
    expect(again._meta?.["io.keycap/replay"]).to.equal(true);
    expect(api.requests.filter((r) => r.path === "/v1/charges")).to.have.length(1);
    const receipt = (await host!.client.callTool({ name: "send_receipt", arguments: { order_id: "ord-1", email: "a@example.com" } })) as CallToolResult;
    expect(receipt.isError, JSON.stringify(receipt)).to.not.equal(true);
    expect(api.receipts).to.have.length(1);
  });

  it("refuses a direct call without a capability, for other arguments, expired, of another tool, or without a derivation, before the handler runs", async function () {
    const args = { order_id: "ord-2", amount_cents: 500 };
    const begun = (toolId: string, a: unknown) => s.kernelCalls.beginCall(toolId, a);
    const otherArgs = await begun(CHARGE, { order_id: "ord-2", amount_cents: 50_000 });
    const receipt = await begun(RECEIPT, { order_id: "ord-2", email: "a@example.com" });
    const mine = await begun(CHARGE, args);
    const claims = JSON.parse(Buffer.from(mine.capability.split(".")[1]!, "base64url").toString()) as {
      key: string;
      derivation: { version: number; fields: string[]; context: { run_id?: string } };
      call_id: string;
    };
    const minted = (now: () => number, derivation: boolean) =>
      s.minter({ now }).then((m) =>
        m.mint({
          principal: "local-runtime",
          toolId: CHARGE,
          effect: "idempotent",
          callId: claims.call_id,
          attempt: 1,
          key: claims.key,
          ...(derivation ? { derivation: claims.derivation } : {}),
        }),
      );
    const expired = await minted(() => Date.now() - 3_600_000, true);
    const underived = await minted(Date.now, false);

    const cases: [string, string | undefined, string][] = [
      ["no capability", undefined, "CAPABILITY_MISSING"],
      ["a capability for other arguments", otherArgs.capability, "KEY_MISMATCH"],
      ["an expired capability", expired.token, "EXPIRED"],
      ["another tool's capability", receipt.capability, "TOOL_NOT_ACCEPTED"],
      ["a capability without a derivation claim", underived.token, "CLAIM_MISSING"],
    ];
    for (const [what, capability, reason] of cases) {
      const data = await refusal(callDirect("charge", args, capability));
      expect([what, data.reason, data.tool_id, data.domain]).to.deep.equal([what, reason, CHARGE, "keycap.dev"]);
    }
    expect(direct.handlerCalls["charge"]).to.equal(0);
    // The capability for exactly these arguments is admitted, and the API gets its key.
    await callDirect("charge", args, mine.capability);
    expect(direct.handlerCalls["charge"]).to.equal(1);
    expect(api.charges.find((c) => c.orderId === "ord-2")?.idempotencyKey).to.equal(mine.call!.key);
  });

  it("refuses an Unsafe capability used a second time, before the handler runs", async function () {
    const before = direct.handlerCalls["send_receipt"]!;
    const receipt = await s.kernelCalls.beginCall(RECEIPT, { order_id: "ord-3", email: "b@example.com" });
    await callDirect("send_receipt", { order_id: "ord-3", email: "b@example.com" }, receipt.capability);
    const data = await refusal(callDirect("send_receipt", { order_id: "ord-3", email: "b@example.com" }, receipt.capability));
    expect([data.reason, data.tool_id]).to.deep.equal(["CAPABILITY_REUSED", RECEIPT]);
    expect(direct.handlerCalls["send_receipt"]).to.equal(before + 1);
  });

  it("lists every refusal with keycap rejections --service sink:payments, against the tool called", async function () {
    await refusals.flush();
    const r = await runCli(["rejections", "--service", "sink:payments", "--json", "--limit", "100"], {
      KEYCAP_ADMIN_TOKEN: s.adminToken,
      KEYCAP_ADMIN_ADDRESS: s.ledger.endpoints.admin!,
    });
    expect(r.code, r.stderr).to.equal(0);
    const rows = JSON.parse(r.stdout) as { service: string; toolId: string; reason: string; method: string }[];
    const listed = rows.map((x) => [x.service, x.reason, x.toolId, x.method]).sort();
    expect(listed).to.deep.equal(
      [
        ["sink:payments", "CAPABILITY_MISSING", CHARGE, "MCP tools/call charge"],
        ["sink:payments", "CAPABILITY_REUSED", RECEIPT, "MCP tools/call send_receipt"],
        ["sink:payments", "CLAIM_MISSING", CHARGE, "MCP tools/call charge"],
        ["sink:payments", "EXPIRED", CHARGE, "MCP tools/call charge"],
        ["sink:payments", "KEY_MISMATCH", CHARGE, "MCP tools/call charge"],
        ["sink:payments", "TOOL_NOT_ACCEPTED", CHARGE, "MCP tools/call charge"],
      ].sort(),
    );
  });

  it("passes a keycap-aware server's refusal of the gateway's own call through to the host, and the call stays retryable", async function () {
    // The same server behind an upstream named "billing": the gateway registers and begins
    // mcp:billing/charge, which the server (governing mcp:payments/*) does not accept.
    const policy = examplePolicy("billing");
    const billing = await connectHost(policy, { ...s.env, KEYCAP_KERNEL_ADDRESS: s.kernel.endpoints.kernel!, KEYCAP_RUNTIME_TOKEN: TEST_RUNTIME_TOKEN });
    try {
      const args = { order_id: "ord-billing", amount_cents: 700 };
      for (const attempt of ["first", "retry"]) {
        const data = await refusal(billing.client.callTool({ name: "charge", arguments: args }));
        expect([attempt, data.reason, data.tool_id, data.metadata["refused_by"]]).to.deep.equal([
          attempt,
          "TOOL_NOT_ACCEPTED",
          "mcp:billing/charge",
          "upstream",
        ]);
      }
      expect(api.charges.filter((c) => c.orderId === "ord-billing")).to.have.length(0);
    } finally {
      await billing.close();
    }
  });
});
