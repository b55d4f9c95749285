/**
 * Issue 29: the MCP server middleware (McpSink) in process, over the SDK's in-memory transport.
 * The shared capability vectors go through its transport guard and give the ledger's verdict;
 * the key-derivation vectors go through its re-derivation; a governed call is admitted only
 * for the arguments its key was derived from, before any handler runs, with McpServer as with
 * the low-level Server.
 */
import { createPrivateKey, randomUUID, sign, type JsonWebKey, type KeyObject } from "node:crypto";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { expect } from "chai";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { CallToolRequestSchema, McpError, type CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { RemoteJwksSource } from "../../services/capability/src";
import { KeycapError } from "../../services/common/src/errors";
import { derivationClaim, deriveKey } from "../../services/common/src/domain/key-derivation";
import { parseArguments } from "../../services/common/src/domain/strict-json";
import {
  bindArguments,
  InMemorySpentStore,
  keycapCallOf,
  McpSink,
  rederiveKey,
  type KeycapErrorData,
  type KeycapToolCall,
  type McpSinkOptions,
  type SinkRefusalEvent,
  type VerifiedCapability,
} from "../../services/sink/src";
import { loadCapabilityVectors, verdictFor, type CapabilityVector, type VectorJwks } from "../support/capability-vectors";
import { loadKeyDerivationVectors } from "../support/key-derivation-vectors";

const corpus = loadCapabilityVectors();

/** A client connected to `server` through the sink's guard. */
async function connect(sink: McpSink, server: Server | McpServer): Promise<Client> {
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(sink.guard(serverSide));
  const client = new Client({ name: "mcp-sink-test", version: "1.0.0" });
  await client.connect(clientSide);
  return client;
}

/** A low-level Server whose every tool counts its calls and answers the admitted call it sees. */
function countingServer(): { server: Server; calls: KeycapToolCall[]; count: () => number } {
  const calls: KeycapToolCall[] = [];
  let count = 0;
  const server = new Server({ name: "vectors", version: "1.0.0" }, { capabilities: { tools: {} } });
  server.setRequestHandler(CallToolRequestSchema, (_request, extra): CallToolResult => {
    count++;
    calls.push(keycapCallOf(extra));
    return { content: [{ type: "text", text: "ran" }] };
  });
  return { server, calls, count: () => count };
}

async function refusalOf(p: Promise<unknown>): Promise<{ code: number; data: KeycapErrorData }> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, "expected an MCP error").to.be.instanceOf(McpError);
  return { code: (err as McpError).code, data: (err as McpError).data as KeycapErrorData };
}

function keysOf(jwks: VectorJwks | null): RemoteJwksSource {
  return new RemoteJwksSource(async () => {
    if (jwks === null) throw new Error("GetSigningKeys at 127.0.0.1:1: connect ECONNREFUSED");
    return JSON.stringify(jwks);
  });
}

function vectorSink(vector: CapabilityVector, toolId: string, events: SinkRefusalEvent[]): McpSink {
  return new McpSink({
    name: "vectors",
    tools: { t: { toolId } },
    keys: keysOf(vector.jwks),
    spentStore: new InMemorySpentStore(() => vector.clock * 1000),
    verifier: {
      issuer: corpus.verifier.issuer,
      audience: corpus.verifier.audience,
      maxTokenBytes: corpus.verifier.max_token_bytes,
      maxLifetimeSeconds: corpus.verifier.max_lifetime_seconds,
      clockToleranceSeconds: corpus.verifier.clock_tolerance_seconds,
    },
    now: () => vector.clock * 1000,
    onRefusal: (e) => events.push(e),
  });
}

function toolIdIn(token: string): string {
  try {
    const claims = JSON.parse(Buffer.from(token.split(".")[1] ?? "", "base64url").toString()) as { tool_id?: unknown };
    return typeof claims.tool_id === "string" && claims.tool_id !== "" ? claims.tool_id : "payments.charge";
  } catch {
    return "payments.charge";
  }
}

describe("MCP server middleware (issue 29)", () => {
  describe("test/vectors/capability-verification.json through the transport guard", () => {
    for (const vector of corpus.vectors) {
      // These two are about the Authorization header's scheme (Basic, lower-case bearer), which `_meta` does not have.
      if (typeof vector.authorization === "string" && vector.authorization.trim() !== "") continue;
      const verdict = verdictFor(vector, "sink");
      const idempotent = "verified" in verdict && verdict.verified["effect"] === "idempotent";
      const outcome = "verified" in verdict ? (idempotent ? "refuses CLAIM_MISSING (no derivation to bind)" : "admits") : `refuses ${verdict.refused}`;
      it(`${vector.name}: ${outcome}`, async () => {
        const events: SinkRefusalEvent[] = [];
        const toolId = toolIdIn(vector.token);
        const { server, calls, count } = countingServer();
        const client = await connect(vectorSink(vector, toolId, events), server);
        const meta = vector.authorization === null ? {} : { "io.keycap/capability": vector.authorization ?? vector.token };
        const call = client.callTool({ name: "t", arguments: { order_id: "A-17" }, _meta: meta });
        if ("verified" in verdict && !idempotent) {
          await call;
          expect(calls.map((c) => c.capability)).to.deep.equal([verdict.verified]);
          expect(events).to.deep.equal([]);
        } else {
          const reason = "verified" in verdict ? "CLAIM_MISSING" : verdict.refused;
          const refused = await refusalOf(call);
          expect(refused.data).to.deep.include({ reason, domain: "keycap.dev", tool_id: toolId });
          expect(count()).to.equal(0);
          expect(events.map((e) => [e.error.reason, e.toolId])).to.deep.equal([[reason, toolId]]);
        }
        await client.close();
      });
    }
  });

  describe("test/vectors/key-derivation.json through the re-derivation", () => {
    const file = loadKeyDerivationVectors();
    const limits = { maxBytes: file.limits.max_bytes, maxDepth: file.limits.max_depth };
    // The middleware receives text the transport already decoded: byte-level (UTF-8) vectors do not apply.
    const textual = file.vectors.filter((v) => v.arguments_json !== undefined && v.context.run_id_utf8_hex === undefined);
    for (const v of textual) {
      const claim = derivationClaim(
        { fields: v.derivation.fields, version: v.derivation.version, contextFields: v.derivation.context_fields ?? [] },
        { runId: v.context.run_id ?? "" },
      );
      const text = v.arguments_json!;
      if ("key" in v.expect) {
        const want = v.expect.key;
        it(`${v.name}: re-derives ${want}, and binds the parsed arguments to it`, () => {
          expect(rederiveKey(v.tool_id, claim, text, limits)).to.equal(want);
          const cap = capabilityFor(v.tool_id, want, claim);
          expect(bindArguments(cap, JSON.parse(text))).to.equal(undefined);
          expect(bindArguments({ ...cap, key: `${want}x` }, JSON.parse(text))?.reason).to.equal("KEY_MISMATCH");
        });
      } else {
        const want = v.expect.error;
        it(`${v.name}: refuses ${want}, and binds nothing`, () => {
          const err = (() => {
            try {
              rederiveKey(v.tool_id, claim, text, limits);
            } catch (e) {
              return e;
            }
            return undefined;
          })();
          expect(err).to.be.instanceOf(KeycapError);
          expect((err as KeycapError).reason).to.equal(want);
          let parsed: unknown;
          try {
            parsed = JSON.parse(text);
          } catch {
            return; // not JSON at all: the transport would never have delivered it
          }
          const refused = bindArguments(capabilityFor(v.tool_id, "some-key", claim), parsed);
          expect(refused?.reason).to.be.oneOf(["KEY_MISMATCH", "CLAIM_INVALID"]);
        });
      }
    }
  });

  describe("a governed call", () => {
    const kernel = corpus.keys["kernel-current"]!;
    const jwks: VectorJwks = { keys: [{ kty: kernel["kty"], crv: kernel["crv"], x: kernel["x"], kid: kernel["kid"], alg: "EdDSA", use: "sig" }] };
    const claim = derivationClaim({ fields: ["/order_id", "/amount_cents"], version: 1, contextFields: [] }, { runId: "" });
    const charge = (toolId: string, args: string, overrides: Record<string, unknown> = {}): string => {
      const key = deriveKey(toolId, { fields: claim.fields, version: 1, contextFields: [] }, parseArguments(args), { runId: "" });
      return signCapability(capabilityFor(toolId, key, claim, overrides));
    };
    function signCapability(claims: object): string {
      const input = `${b64({ alg: "EdDSA", typ: "keycap-capability+jwt", kid: kernel["kid"] })}.${b64(claims)}`;
      const key = createPrivateKey({ key: kernel as JsonWebKey, format: "jwk" });
      return `${input}.${signEd25519(input, key)}`;
    }
    const options = (events: SinkRefusalEvent[]): McpSinkOptions => ({
      name: "payments",
      tools: { charge: true, send_receipt: true },
      keys: keysOf(jwks),
      spentStore: new InMemorySpentStore(),
      onRefusal: (e) => events.push(e),
    });

    it("runs an McpServer tool's handler with the key re-derived from these arguments, and refuses them with another call's capability before it runs", async () => {
      const events: SinkRefusalEvent[] = [];
      const seen: KeycapToolCall[] = [];
      const mcp = new McpServer({ name: "payments", version: "1.0.0" });
      mcp.registerTool("charge", { description: "charges" }, (extra) => {
        seen.push(keycapCallOf(extra));
        return { content: [{ type: "text", text: "charged" }] };
      });
      const client = await connect(new McpSink(options(events)), mcp);
      const args = { order_id: "A-17", amount_cents: 1250 };
      const cap = charge("mcp:payments/charge", JSON.stringify(args));
      await client.callTool({ name: "charge", arguments: { ...args, note: "not in the key" }, _meta: { "io.keycap/capability": cap } });
      expect(seen.map((c) => [c.toolId, c.effect, c.idempotencyKey])).to.deep.equal([["mcp:payments/charge", "idempotent", seen[0]!.key]]);
      expect(seen[0]!.key).to.be.a("string").with.length(43);
      const other = await refusalOf(client.callTool({ name: "charge", arguments: { ...args, amount_cents: 99_999 }, _meta: { "io.keycap/capability": cap } }));
      expect(other).to.deep.include({ code: -32602 });
      expect(other.data).to.deep.include({ reason: "KEY_MISMATCH", tool_id: "mcp:payments/charge" });
      const missing = await refusalOf(client.callTool({ name: "charge", arguments: args }));
      expect(missing.data.reason).to.equal("CAPABILITY_MISSING");
      expect(seen).to.have.length(1);
      expect(events.map((e) => [e.error.reason, e.toolId])).to.deep.equal([
        ["KEY_MISMATCH", "mcp:payments/charge"],
        ["CAPABILITY_MISSING", "mcp:payments/charge"],
      ]);
      await client.close();
    });

    it("refuses another tool's capability TOOL_NOT_ACCEPTED without spending it, and an Unsafe capability's second use CAPABILITY_REUSED", async () => {
      const events: SinkRefusalEvent[] = [];
      const { server, count, calls } = countingServer();
      const client = await connect(new McpSink(options(events)), server);
      const receipt = signCapability(capabilityFor("mcp:payments/send_receipt", undefined, undefined, { effect: "unsafe" }));
      const wrongTool = await refusalOf(client.callTool({ name: "charge", arguments: { order_id: "A" }, _meta: { "io.keycap/capability": receipt } }));
      expect(wrongTool.data).to.deep.include({ reason: "TOOL_NOT_ACCEPTED", tool_id: "mcp:payments/charge" });
      await client.callTool({ name: "send_receipt", arguments: { order_id: "A" }, _meta: { "io.keycap/capability": receipt } });
      const reused = await refusalOf(client.callTool({ name: "send_receipt", arguments: { order_id: "A" }, _meta: { "io.keycap/capability": receipt } }));
      expect(reused.data).to.deep.include({ reason: "CAPABILITY_REUSED", tool_id: "mcp:payments/send_receipt" });
      expect(count()).to.equal(1);
      expect(calls[0]!.idempotencyKey).to.equal(undefined);
      expect(events.map((e) => [e.error.reason, e.toolId, e.toolIdVerified])).to.deep.equal([
        ["TOOL_NOT_ACCEPTED", "mcp:payments/charge", false],
        ["CAPABILITY_REUSED", "mcp:payments/send_receipt", true],
      ]);
      await client.close();
    });

    it("admits and refuses the same way over Streamable HTTP", async () => {
      const events: SinkRefusalEvent[] = [];
      const { server, count } = countingServer();
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: () => randomUUID() });
      await server.connect(new McpSink(options(events)).guard(transport));
      const listener = http.createServer((req, res) => void transport.handleRequest(req, res));
      await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
      const client = new Client({ name: "http-client", version: "1.0.0" });
      try {
        await client.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${(listener.address() as AddressInfo).port}/mcp`)));
        const args = { order_id: "H-1", amount_cents: 10 };
        await client.callTool({ name: "charge", arguments: args, _meta: { "io.keycap/capability": charge("mcp:payments/charge", JSON.stringify(args)) } });
        const refused = await refusalOf(client.callTool({ name: "charge", arguments: args }));
        expect(refused.data.reason).to.equal("CAPABILITY_MISSING");
        expect(count()).to.equal(1);
        expect(events.map((e) => e.context.peer)).to.deep.equal([`mcp-session:${transport.sessionId!}`]);
      } finally {
        await client.close();
        await new Promise((resolve) => listener.close(resolve));
      }
    });

    it("drops a call its client cancelled while it was being admitted: the handler never runs", async () => {
      let release!: () => void;
      const keysReady = new Promise<void>((resolve) => (release = resolve));
      const slowKeys = new RemoteJwksSource(async () => {
        await keysReady;
        return JSON.stringify(jwks);
      });
      const { server, count } = countingServer();
      const client = await connect(new McpSink({ ...options([]), keys: slowKeys }), server);
      const receipt = signCapability(capabilityFor("mcp:payments/send_receipt", undefined, undefined, { effect: "unsafe" }));
      const abort = new AbortController();
      const call = client.callTool({ name: "send_receipt", arguments: {}, _meta: { "io.keycap/capability": receipt } }, undefined, { signal: abort.signal });
      await new Promise((resolve) => setTimeout(resolve, 50));
      abort.abort();
      await call.catch(() => undefined);
      release();
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(count()).to.equal(0);
      await client.close();
    });

    it("passes a tool it does not govern untouched; its handler finds no admitted call", async () => {
      const { server } = countingServer();
      const client = await connect(new McpSink(options([])), server);
      // countingServer's handler asks for the admitted call: for an ungoverned tool it throws (a wiring mistake, said as one).
      const err = await refusalOf(client.callTool({ name: "get_status", arguments: {}, _meta: { "io.keycap/idempotency-key": "forged" } }));
      expect(err.code).to.equal(-32603);
      await client.close();
    });
  });
});

function capabilityFor(
  toolId: string,
  key: string | undefined,
  derivation: ReturnType<typeof derivationClaim> | undefined,
  overrides: Record<string, unknown> = {},
): VerifiedCapability {
  const iat = Math.floor(Date.now() / 1000);
  return {
    iss: "keycap-kernel",
    aud: "keycap-ledger",
    sub: "test-runtime",
    tool_id: toolId,
    effect: "idempotent",
    call_id: "call-1",
    attempt: 1,
    jti: `jti-${Math.random().toString(36).slice(2)}`,
    iat,
    exp: iat + 300,
    kid: "test",
    ...(key !== undefined ? { key } : {}),
    ...(derivation !== undefined ? { derivation } : {}),
    ...overrides,
  } as VerifiedCapability;
}

function b64(v: unknown): string {
  return Buffer.from(JSON.stringify(v)).toString("base64url");
}

function signEd25519(input: string, key: KeyObject): string {
  return sign(null, Buffer.from(input), key).toString("base64url");
}
