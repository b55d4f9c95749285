/**
 * Issue 14: the rules written in proto/ (protovalidate) are what the kernel
 * enforces on RegisterTool, with the reason the proto names beside each rule
 * and a google.rpc.BadRequest field violation per bad field. Sent through the
 * public KernelClient.registerToolProto, which takes the generated type as is.
 */
import { unchecked } from "./support/unchecked-tool";
import { expect } from "chai";
import { KernelClient, KeycapClientError } from "../clients/ts/src";
import { ContextField, type EffectClass } from "../gen/ts/keycap/effect/v1/effect";
import type { Tool } from "../gen/ts/keycap/kernel/v1/kernel";
import { serviceEnv, startService, type ServiceProcess } from "./support/processes";

describe("request rules from the proto (issue 14)", function () {
  this.timeout(60_000);
  let kernel: ServiceProcess;
  let client: KernelClient;
  before(async function () {
    kernel = await startService("kernel", serviceEnv());
    client = new KernelClient(kernel.endpoints.kernel!);
  });
  after(async function () {
    client.close();
    await kernel.stop();
  });

  const tool = (toolId: string, effectClass: EffectClass | undefined): Tool => ({
    toolId,
    effectClass,
    argumentsSchemaJson: "",
    registeredAt: undefined,
    owner: "",
    httpDestination: undefined,
  });
  const idem = (fields: string[], contextFields: ContextField[] = []): EffectClass => ({
    kind: { $case: "idempotent", value: { key: { fields, version: 1, contextFields } } },
  });

  async function refused(t: Tool): Promise<KeycapClientError> {
    const e = await client.registerToolProto(unchecked(t)).then(
      () => undefined,
      (err: unknown) => KeycapClientError.from(err),
    );
    if (!e) throw new Error(`registered ${t.toolId}`);
    expect(e.codeName).to.equal("INVALID_ARGUMENT");
    return e;
  }

  const cases: [string, Tool, string, string][] = [
    [
      "an Idempotent without a key",
      tool("rules.nokey", { kind: { $case: "idempotent", value: { key: undefined } } }),
      "KEY_DERIVATION_REQUIRED",
      "tool.effect_class.idempotent.key",
    ],
    ["an Idempotent with no fields", tool("rules.nofields", idem([])), "KEY_DERIVATION_NO_FIELDS", "tool.effect_class.idempotent.key.fields"],
    ["a field named twice", tool("rules.twice", idem(["/a", "/a"])), "KEY_DERIVATION_DUPLICATE_FIELD", "tool.effect_class.idempotent.key.fields"],
    ["a field that is not a JSON Pointer", tool("rules.pointer", idem(["/a", "b"])), "INVALID_JSON_POINTER", "tool.effect_class.idempotent.key.fields[1]"],
    [
      "an unspecified context field",
      tool("rules.context", idem(["/a"], [ContextField.CONTEXT_FIELD_UNSPECIFIED])),
      "KEY_DERIVATION_BAD_CONTEXT_FIELD",
      "tool.effect_class.idempotent.key.context_fields[0]",
    ],
    ["no effect class", tool("rules.noeffect", undefined), "EFFECT_CLASS_REQUIRED", "tool.effect_class"],
    ["an empty effect class", tool("rules.emptyeffect", { kind: undefined }), "EFFECT_CLASS_REQUIRED", "tool.effect_class.kind"],
    [
      "a Queryable without a lookup",
      tool("rules.nolookup", { kind: { $case: "queryable", value: { lookup: undefined } } }),
      "REQUEST_ID_FIELD_REQUIRED",
      "tool.effect_class.queryable.lookup",
    ],
    ["a tool id with a space", tool("rules bad", idem(["/a"])), "INVALID_TOOL_ID", "tool.tool_id"],
  ];
  for (const [what, t, reason, field] of cases) {
    it(`refuses ${what}: ${reason} with a BadRequest violation of ${field}`, async function () {
      const e = await refused(t);
      expect(e.reason, e.message).to.equal(reason);
      expect(e.fieldViolations.map((v) => v.field)).to.include(field);
      expect(e.fieldViolations.find((v) => v.field === field)?.reason).to.equal(reason);
    });
  }

  it("names every bad field of a request at once", async function () {
    const e = await refused(tool("bad id", idem(["x", "x"])));
    expect(e.fieldViolations.map((v) => v.reason)).to.include.members(["INVALID_TOOL_ID", "KEY_DERIVATION_DUPLICATE_FIELD", "INVALID_JSON_POINTER"]);
  });

  it("accepts the valid shape", async function () {
    const res = await client.registerToolProto(unchecked(tool("rules.ok", idem(["/a", "/b~1c"], [ContextField.CONTEXT_FIELD_RUN_ID]))));
    expect(res.tool?.toolId).to.equal("rules.ok");
  });
});
