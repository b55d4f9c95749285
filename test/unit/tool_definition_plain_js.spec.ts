/**
 * Issue 33 item 7: a plain-JavaScript caller (no type check) who declares an Idempotent tool
 * without `key` got `UNKNOWN: Cannot read properties of undefined (reading 'fields')`. The
 * client now refuses it before sending, with the kernel's reason and the field to add.
 */
import { expect } from "chai";
import { KernelClient, KeycapClientError, type ToolDefinition } from "../../clients/ts/src";

describe("TypeScript client: a definition plain JavaScript can pass but the types forbid", function () {
  // Nothing listens here: a refusal that needed the network would be UNAVAILABLE instead.
  const kernel = new KernelClient("127.0.0.1:1", { token: "keycap_rt_unused", coalesce: false });
  after(() => kernel.close());

  const refusalOf = async (def: unknown): Promise<KeycapClientError> => {
    try {
      await kernel.registerTool(def as ToolDefinition, { timeoutMs: 2000, retry: false });
    } catch (err) {
      return KeycapClientError.from(err);
    }
    throw new Error("registered");
  };

  it("refuses an Idempotent tool without key, naming the reason and the field to add, without sending", async function () {
    for (const effect of [{ kind: "idempotent" }, { kind: "idempotent", key: {} }, { kind: "idempotent", key: { fields: "/order_id" } }]) {
      const e = await refusalOf({ id: "js.charge", effect });
      expect([e.codeName, e.reason, e.metadata["field"]]).to.deep.equal(["INVALID_ARGUMENT", "KEY_DERIVATION_REQUIRED", "tool.effect_class.idempotent.key"]);
      expect(e.message).to.include('key: { fields: ["/order_id"] }');
    }
  });

  it("refuses an unknown or missing effect kind the same way", async function () {
    for (const def of [{ id: "js.x", effect: { kind: "idempotant" } }, { id: "js.y" }]) {
      const e = await refusalOf(def);
      expect([e.codeName, e.reason]).to.deep.equal(["INVALID_ARGUMENT", "EFFECT_CLASS_REQUIRED"]);
    }
  });
});
