import { expect } from "chai";
import { unchecked } from "./support/unchecked-tool";
import type { Tool } from "../gen/ts/keycap/kernel/v1/kernel";
import { createLocalJWKSet, decodeProtectedHeader, generateKeyPair, jwtVerify, SignJWT } from "jose";
import { CallState } from "../gen/ts/keycap/kernel/v1/kernel";
import { defineTool, KernelClient, type ToolDefinition } from "../clients/ts/src";
import { refusal } from "./support/refusal";
import { serviceEnv, startService, type ServiceProcess } from "./support/processes";

const charge = defineTool({
  id: "payments.charge",
  effect: { kind: "idempotent", key: { fields: ["/order_id", "/amount"], contextFields: ["run_id"] } },
  argumentsSchema: {
    type: "object",
    properties: {
      order_id: { type: "string" },
      amount: { type: "number" },
      requested_at: { type: "string", format: "date-time" },
      note: { type: "string", "x-keycap-volatile": true },
    },
    required: ["order_id", "amount"],
  },
});

describe("kernel: registry, key derivation, capabilities and the call journal (real process, real MongoDB)", function () {
  let env: Record<string, string>;
  let proc: ServiceProcess;
  let kernel: KernelClient;

  before(async function () {
    env = serviceEnv();
    proc = await startService("kernel", env);
    kernel = new KernelClient(proc.endpoints.kernel!);
    await kernel.registerTool(charge);
  });

  after(async function () {
    kernel?.close();
    await proc?.stop("SIGKILL").catch(() => undefined);
  });

  describe("registry", function () {
    it("registering the same definition again changes nothing", async function () {
      const again = await kernel.registerTool(charge);
      expect(again.alreadyRegistered).to.equal(true);
      expect(again.tool?.toolId).to.equal("payments.charge");
    });

    it("refuses another definition under an existing tool id with ALREADY_EXISTS", async function () {
      const other = defineTool({ id: "payments.charge", effect: { kind: "idempotent", key: { fields: ["/order_id"] } } });
      const err = await refusal(kernel.registerTool(other));
      expect(err.codeName).to.equal("ALREADY_EXISTS");
      expect(err.reason).to.equal("TOOL_DEFINITION_CONFLICT");
    });

    it("leaves a structured record of every refusal in the kernel's log (method, code, reason)", async function () {
      await refusal(kernel.beginCall("no.such.tool.for.audit", "{}"));
      let record: { method?: string; code?: string; reason?: string } | undefined;
      for (let i = 0; i < 50 && !record; i++) {
        record = proc
          .output()
          .split("\n")
          .filter((l) => l.startsWith("{"))
          .map((l) => JSON.parse(l) as { msg?: string; method?: string; code?: string; reason?: string; metadata?: Record<string, string> })
          .find((r) => r.msg === "refused" && r.metadata?.["tool_id"] === "no.such.tool.for.audit");
        if (!record) await new Promise((r) => setTimeout(r, 50));
      }
      expect(record).to.include({ method: "BeginCall", code: "NOT_FOUND", reason: "TOOL_NOT_FOUND" });
    });

    const refused: [string, Tool, string, string][] = [
      [
        "an Idempotent tool without a KeyDerivation (names the field key)",
        {
          toolId: "r.nokey",
          effectClass: { kind: { $case: "idempotent", value: { key: undefined } } },
          argumentsSchemaJson: "",
          registeredAt: undefined,
          owner: "",
          httpDestination: undefined,
        },
        "KEY_DERIVATION_REQUIRED",
        "idempotent.key",
      ],
      [
        "a derivation with no fields",
        {
          toolId: "r.nofields",
          effectClass: { kind: { $case: "idempotent", value: { key: { fields: [], version: 1, contextFields: [] } } } },
          argumentsSchemaJson: "",
          registeredAt: undefined,
          owner: "",
          httpDestination: undefined,
        },
        "KEY_DERIVATION_NO_FIELDS",
        "fields",
      ],
      [
        "a field that is not an RFC 6901 JSON Pointer",
        {
          toolId: "r.badptr",
          effectClass: { kind: { $case: "idempotent", value: { key: { fields: ["order_id"], version: 1, contextFields: [] } } } },
          argumentsSchemaJson: "",
          registeredAt: undefined,
          owner: "",
          httpDestination: undefined,
        },
        "INVALID_JSON_POINTER",
        "order_id",
      ],
      [
        "a key field the schema does not define",
        {
          toolId: "r.undefined",
          effectClass: { kind: { $case: "idempotent", value: { key: { fields: ["/customer"], version: 1, contextFields: [] } } } },
          argumentsSchemaJson: JSON.stringify({ type: "object", properties: { order_id: { type: "string" } } }),
          registeredAt: undefined,
          owner: "",
          httpDestination: undefined,
        },
        "KEY_FIELD_NOT_IN_SCHEMA",
        "/customer",
      ],
      [
        "a key field the schema marks volatile (format date-time)",
        {
          toolId: "r.volatile",
          effectClass: { kind: { $case: "idempotent", value: { key: { fields: ["/requested_at"], version: 1, contextFields: [] } } } },
          argumentsSchemaJson: JSON.stringify({ type: "object", properties: { requested_at: { type: "string", format: "date-time" } } }),
          registeredAt: undefined,
          owner: "",
          httpDestination: undefined,
        },
        "KEY_FIELD_VOLATILE",
        "/requested_at",
      ],
      [
        "a key field marked x-keycap-volatile",
        {
          toolId: "r.volatile2",
          effectClass: { kind: { $case: "idempotent", value: { key: { fields: ["/nonce"], version: 1, contextFields: [] } } } },
          argumentsSchemaJson: JSON.stringify({ type: "object", properties: { nonce: { type: "string", "x-keycap-volatile": true } } }),
          registeredAt: undefined,
          owner: "",
          httpDestination: undefined,
        },
        "KEY_FIELD_VOLATILE",
        "/nonce",
      ],
      [
        "an invalid schema",
        {
          toolId: "r.badschema",
          effectClass: { kind: { $case: "idempotent", value: { key: { fields: ["/a"], version: 1, contextFields: [] } } } },
          argumentsSchemaJson: JSON.stringify({ type: "object", properties: { a: { type: "strng" } } }),
          registeredAt: undefined,
          owner: "",
          httpDestination: undefined,
        },
        "INVALID_ARGUMENT_SCHEMA",
        "schema",
      ],
      [
        "a Queryable tool without a request-id field",
        {
          toolId: "r.noreq",
          effectClass: { kind: { $case: "queryable", value: { lookup: undefined } } },
          argumentsSchemaJson: "",
          registeredAt: undefined,
          owner: "",
          httpDestination: undefined,
        },
        "REQUEST_ID_FIELD_REQUIRED",
        "lookup",
      ],
      [
        "a tool without an effect class",
        { toolId: "r.noclass", effectClass: undefined, argumentsSchemaJson: "", registeredAt: undefined, owner: "", httpDestination: undefined },
        "EFFECT_CLASS_REQUIRED",
        "effect_class",
      ],
    ];
    for (const [what, tool, reason, named] of refused) {
      it(`refuses ${what} with INVALID_ARGUMENT, and stores nothing`, async function () {
        const err = await refusal(kernel.registerToolProto(unchecked(tool)));
        expect(err.codeName).to.equal("INVALID_ARGUMENT");
        expect(err.reason).to.equal(reason);
        expect(err.message).to.include(named);
        const lookup = await refusal(kernel.getTool(tool.toolId));
        expect(lookup.codeName).to.equal("NOT_FOUND");
      });
    }

    it("names the refused field by its proto path: dotted, snake_case, no spaces (issue 14)", async function () {
      const idem = (toolId: string, key: { fields: string[]; version: number; contextFields: [] }): Tool => ({
        toolId,
        effectClass: { kind: { $case: "idempotent", value: { key } } },
        argumentsSchemaJson: "",
        registeredAt: undefined,
        owner: "",
        httpDestination: undefined,
      });
      const cases: [Tool, string][] = [
        [idem("p.nofields", { fields: [], version: 1, contextFields: [] }), "tool.effect_class.idempotent.key.fields"],
        [idem("p.badptr", { fields: ["/a", "order_id"], version: 1, contextFields: [] }), "tool.effect_class.idempotent.key.fields[1]"],
        [
          {
            toolId: "p.req",
            effectClass: { kind: { $case: "queryable", value: { lookup: { requestIdField: "nope" } } } },
            argumentsSchemaJson: "",
            registeredAt: undefined,
            owner: "",
            httpDestination: undefined,
          },
          "tool.effect_class.queryable.lookup.request_id_field",
        ],
      ];
      for (const [tool, field] of cases) {
        const err = await refusal(kernel.registerToolProto(unchecked(tool)));
        expect(err.metadata["field"], tool.toolId).to.equal(field);
      }
    });
  });

  describe("key derivation through BeginCall", function () {
    const args = { order_id: "A-17", amount: 12.5, requested_at: "2026-12-02T10:00:00Z" };

    it("derives the identical key 100 times from the same recorded arguments", async function () {
      const keys = new Set<string>();
      for (let i = 0; i < 100; i++) keys.add((await kernel.begin(charge.id, args, { runId: "run-1" })).key);
      expect(keys.size).to.equal(1);
      expect([...keys][0]).to.match(/^[A-Za-z0-9_-]{43}$/);
    });

    it("ignores member order and fields the derivation does not name (a changed requested_at)", async function () {
      const a = await kernel.begin(charge.id, args, { runId: "run-1" });
      const b = await kernel.begin(charge.id, '{"requested_at":"2027-01-01T00:00:00Z","amount":12.5,"order_id":"A-17"}', { runId: "run-1" });
      expect(b.key).to.equal(a.key);
    });

    it("gives a different key for a changed key field, and for another run", async function () {
      const a = await kernel.begin(charge.id, args, { runId: "run-1" });
      const otherOrder = await kernel.begin(charge.id, { ...args, order_id: "A-18" }, { runId: "run-1" });
      const otherRun = await kernel.begin(charge.id, args, { runId: "run-2" });
      expect(otherOrder.key).to.not.equal(a.key);
      expect(otherRun.key).to.not.equal(a.key);
    });
  });

  describe("BeginCall refuses bad input with INVALID_ARGUMENT and journals nothing", function () {
    const tool = defineTool({
      id: "refusals.tool",
      effect: { kind: "idempotent", key: { fields: ["/id"] } },
      argumentsSchema: { type: "object", properties: { id: {}, n: { type: "integer", maximum: 10 } } },
    });
    before(async function () {
      await kernel.registerTool(tool);
    });
    const cases: [string, string, string][] = [
      ["text that is not JSON", "{id: 1}", "ARGUMENTS_NOT_JSON"],
      ["JSON that is not an object", "[1,2]", "ARGUMENTS_NOT_OBJECT"],
      ["duplicate member names", '{"id":"a","id":"b"}', "ARGUMENTS_DUPLICATE_MEMBER"],
      ["an integer beyond 2^53 in a key field", '{"id":9007199254740993}', "KEY_FIELD_UNSAFE_INTEGER"],
      ["a missing key field", '{"n":1}', "KEY_FIELD_MISSING"],
      ["a null key field", '{"id":null}', "KEY_FIELD_NULL"],
      ["a non-finite number", '{"id":1e400}', "ARGUMENTS_NON_FINITE_NUMBER"],
      ["arguments over the size limit", JSON.stringify({ id: "x", pad: "y".repeat(70_000) }), "ARGUMENTS_TOO_LARGE"],
      ["arguments over the depth limit", `{"id":1,"deep":${"[".repeat(40)}${"]".repeat(40)}}`, "ARGUMENTS_TOO_DEEP"],
      ["a schema violation", '{"id":"a","n":11}', "ARGUMENTS_SCHEMA_VIOLATION"],
    ];
    for (const [what, text, reason] of cases) {
      it(`refuses ${what}`, async function () {
        const err = await refusal(kernel.beginCall(tool.id, text, { callId: `bad-${reason}` }));
        expect(err.codeName).to.equal("INVALID_ARGUMENT");
        expect(err.reason).to.equal(reason);
        expect(await kernel.listPendingCalls(tool.id)).to.have.length(0);
        const again = await refusal(kernel.resumeCall(`bad-${reason}`));
        expect(again.codeName).to.equal("NOT_FOUND");
      });
    }

    it("refuses an unknown tool with NOT_FOUND", async function () {
      const err = await refusal(kernel.beginCall("no.such.tool", "{}"));
      expect(err.codeName).to.equal("NOT_FOUND");
      expect(err.reason).to.equal("TOOL_NOT_FOUND");
    });
  });

  describe("the call journal", function () {
    it("journals the call as pending, with the arguments exactly as received", async function () {
      const text = '{ "order_id" : "J-1",  "amount": 1.0 }';
      const h = await kernel.begin(charge.id, text, { runId: "run-j", callId: "journal-1" });
      const pending = (await kernel.listPendingCalls(charge.id)).find((c) => c.callId === "journal-1");
      expect(pending?.argumentsJson).to.equal(text);
      expect(pending?.key).to.equal(h.key);
      expect(pending?.attempt).to.equal(1);
      expect(pending?.state).to.equal(CallState.CALL_STATE_PENDING);
    });

    it("returns the same call and capability when the same call id is begun again with the same arguments", async function () {
      const first = await kernel.beginCall(charge.id, '{"order_id":"J-2","amount":2}', { runId: "r", callId: "journal-2" });
      const again = await kernel.beginCall(charge.id, '{"order_id":"J-2","amount":2}', { runId: "r", callId: "journal-2" });
      expect(again.existingCall).to.equal(true);
      expect(again.call?.key).to.equal(first.call?.key);
      expect(again.capability).to.equal(first.capability);
    });

    it("refuses the same call id with other arguments", async function () {
      await kernel.beginCall(charge.id, '{"order_id":"J-3","amount":3}', { runId: "r", callId: "journal-3" });
      const err = await refusal(kernel.beginCall(charge.id, '{"order_id":"J-3","amount":4}', { runId: "r", callId: "journal-3" }));
      expect(err.codeName).to.equal("ALREADY_EXISTS");
      expect(err.reason).to.equal("CALL_ID_CONFLICT");
    });

    it("completes idempotently: same outcome is a no-op, another outcome is refused, and the call leaves the pending list", async function () {
      const h = await kernel.begin(charge.id, { order_id: "J-4", amount: 4 }, { runId: "r" });
      expect((await h.complete("succeeded")).alreadyCompleted).to.equal(false);
      expect((await h.complete("succeeded")).alreadyCompleted).to.equal(true);
      const err = await refusal(h.complete("failed"));
      expect(err.codeName).to.equal("FAILED_PRECONDITION");
      expect(err.reason).to.equal("CALL_ALREADY_COMPLETED");
      expect((await kernel.listPendingCalls(charge.id)).map((c) => c.callId)).to.not.include(h.callId);
    });

    it("pages through pending calls without losing or repeating one", async function () {
      const pager = defineTool({ id: "pager.tool", effect: { kind: "unsafe" } });
      await kernel.registerTool(pager);
      for (let i = 0; i < 7; i++) await kernel.beginCall(pager.id, `{"i":${i}}`, { callId: `page-${i}` });
      const seen: string[] = [];
      let token = "";
      do {
        const page = await kernel.listPendingCallsPage(pager.id, token, 3);
        expect(page.calls.length).to.be.at.most(3);
        seen.push(...page.calls.map((c) => c.callId));
        token = page.nextPageToken;
      } while (token);
      expect(seen).to.deep.equal([0, 1, 2, 3, 4, 5, 6].map((i) => `page-${i}`));
    });
  });

  describe("capabilities", function () {
    it("verify against GetSigningKeys with the pinned algorithm and carry every claim", async function () {
      const res = await kernel.beginCall(charge.id, '{"order_id":"C-1","amount":1}', { runId: "run-c", callId: "cap-1" });
      const { jwksJson } = await kernel.signingKeys();
      expect(jwksJson).to.not.include('"d"');
      const { payload, protectedHeader } = await jwtVerify(res.capability, createLocalJWKSet(JSON.parse(jwksJson)), {
        algorithms: ["EdDSA"],
        audience: "keycap-ledger",
        issuer: "keycap-kernel",
        typ: "keycap-capability+jwt",
      });
      expect(protectedHeader.kid).to.be.a("string").and.not.equal("");
      expect(payload).to.include({ tool_id: charge.id, effect: "idempotent", call_id: "cap-1", attempt: 1, key: res.call?.key, aud: "keycap-ledger" });
      expect(payload.jti).to.be.a("string");
      expect(payload.exp! - payload.iat!).to.equal(300);
    });

    it("one minted by another key does not verify", async function () {
      const { jwksJson } = await kernel.signingKeys();
      const { privateKey } = await generateKeyPair("EdDSA", { crv: "Ed25519" });
      const kid = JSON.parse(jwksJson).keys[0].kid as string;
      const forged = await new SignJWT({ tool_id: charge.id, effect: "idempotent", call_id: "x", attempt: 1, key: "k" })
        .setProtectedHeader({ alg: "EdDSA", typ: "keycap-capability+jwt", kid })
        .setIssuer("keycap-kernel")
        .setAudience("keycap-ledger")
        .setIssuedAt()
        .setExpirationTime("5m")
        .sign(privateKey);
      expect(decodeProtectedHeader(forged).kid).to.equal(kid);
      const err = await jwtVerify(forged, createLocalJWKSet(JSON.parse(jwksJson)), { algorithms: ["EdDSA"] }).catch((e: Error) => e);
      expect(err).to.be.instanceOf(Error);
      expect((err as { code?: string }).code).to.equal("ERR_JWS_SIGNATURE_VERIFICATION_FAILED");
    });
  });

  describe("durability across a kernel crash", function () {
    it("keeps the tool, the pending call and its key after SIGKILL and restart, and old capabilities still verify", async function () {
      const res = await kernel.beginCall(charge.id, '{"order_id":"K-1","amount":9}', { runId: "run-k", callId: "crash-1" });
      kernel.close();
      await proc.stop("SIGKILL");
      proc = await startService("kernel", env);
      kernel = new KernelClient(proc.endpoints.kernel!);
      expect((await kernel.getTool(charge.id))?.toolId).to.equal(charge.id);
      const pending = (await kernel.listPendingCalls(charge.id)).find((c) => c.callId === "crash-1");
      expect(pending?.key).to.equal(res.call?.key);
      const { jwksJson } = await kernel.signingKeys();
      const { payload } = await jwtVerify(res.capability, createLocalJWKSet(JSON.parse(jwksJson)), { algorithms: ["EdDSA"], audience: "keycap-ledger" });
      expect(payload["key"]).to.equal(res.call?.key);
    });
  });
});

// Type-level guard: this must keep compiling (the compile-fail suite checks the opposite).
export const registered: ToolDefinition = charge;
