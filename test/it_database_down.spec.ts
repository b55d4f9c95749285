/**
 * Issue 15: a lost database connection is UNAVAILABLE ("retry"), never INTERNAL, and it
 * is not stored as if the caller had misbehaved. A kernel and a ledger on a private
 * MongoDB-protocol server that the test stops under them.
 */
import { expect } from "chai";
import { AdminClient, defineTool, KernelClient, LedgerClient } from "../clients/ts/src";
import { startMongoServer, type MongoServerHandle } from "../services/common/src/embedded-mongo";
import { readRetryDelayMs } from "../clients/ts/src/status-details";
import { createLogger } from "../services/common/src/logger";
import { refusal } from "./support/refusal";
import { serviceEnv, startService, type ServiceProcess } from "./support/processes";

describe("database down (issue 15)", function () {
  this.timeout(180_000);
  let mongo: MongoServerHandle;
  let proc: ServiceProcess;

  before(async function () {
    if (process.env["MONGODB_URI"]) this.skip(); // needs a server of its own to stop
    mongo = await startMongoServer({ logger: createLogger("db-down-test", "warn") });
    proc = await startService(
      "all",
      serviceEnv({ MONGODB_URI: mongo.uri, KEYCAP_MONGODB_TIMEOUT_MS: "1500", KEYCAP_ADMIN_TOKEN: "db-down-admin-token-000000" }),
    );
  });
  after(async () => {
    await proc?.stop();
    await mongo?.stop();
  });

  it("answers kernel, ledger and admin calls UNAVAILABLE DATABASE_UNAVAILABLE with the cause", async function () {
    const kernel = new KernelClient(proc.endpoints.kernel!, { ledgerAddress: proc.endpoints.ledger! });
    const admin = new AdminClient(proc.endpoints.admin!, "db-down-admin-token-000000");
    const ledger = new LedgerClient(proc.endpoints.ledger!);
    try {
      const tool = defineTool({ id: "down.charge", effect: { kind: "idempotent", key: { fields: ["/id"] } } });
      await kernel.registerTool(tool);
      const h = await kernel.begin(tool.id, { id: 1 });
      const next = await kernel.beginCall(tool.id, JSON.stringify({ id: 2 }));
      await mongo.stop();
      // retry: false shows the service's own answer (the client would retry it until its deadline).
      for (const call of [
        () => kernel.beginCall(tool.id, JSON.stringify({ id: 3 }), { timeoutMs: 15_000, retry: false }),
        () => h.complete("succeeded", "", { timeoutMs: 15_000, retry: false }),
        () => ledger.writeWithCapability(next.capability, { key: next.call!.key, payload: Buffer.from("x") }, { timeoutMs: 15_000, retry: false }),
        () => admin.stats({ timeoutMs: 15_000, retry: false }),
      ]) {
        const e = await refusal(call());
        expect([e.codeName, e.reason], e.message).to.deep.equal(["UNAVAILABLE", "DATABASE_UNAVAILABLE"]);
        expect(e.message).to.match(/retry/);
        expect(readRetryDelayMs(e.cause), "google.rpc.RetryInfo").to.be.greaterThan(0);
      }
      expect(proc.output()).to.not.contain("unexpected error in handler");
    } finally {
      kernel.close();
      admin.close();
      ledger.close();
    }
  });
});
