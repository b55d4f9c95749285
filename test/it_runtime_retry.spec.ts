/**
 * Issue 15: an agent that retries a step in place (Runtime.run again with the same
 * call id) after a lost answer. A Queryable capability is single-use, so writing
 * again would be refused CAPABILITY_REUSED forever; the runtime asks the ledger
 * first, as recovery does, and a step that already completed is not run again.
 */
import { expect } from "chai";
import { defineTool, KernelClient, KeycapClientError, Runtime, type RuntimeTool } from "../clients/ts/src";
import { serviceEnv, startService, type ServiceProcess } from "./support/processes";

describe("runtime: a step retried in place (issue 15)", function () {
  this.timeout(60_000);
  let kernel: ServiceProcess;
  let ledger: ServiceProcess;
  let client: KernelClient;

  before(async function () {
    const env = serviceEnv();
    kernel = await startService("kernel", env);
    ledger = await startService("ledger", { ...env, KEYCAP_KERNEL_ADDRESS: kernel.endpoints.kernel! });
    client = new KernelClient(kernel.endpoints.kernel!, { ledgerAddress: ledger.endpoints.ledger! });
  });
  after(async function () {
    client.close();
    await ledger.stop();
    await kernel.stop();
  });

  /** A Queryable tool whose first run writes and then loses its answer (throws), like a crash after the write. */
  function flakyTicketTool(id: string): { tool: RuntimeTool; runs: () => number } {
    let runs = 0;
    const tool: RuntimeTool = {
      definition: defineTool({ id, effect: { kind: "queryable", requestIdField: "/request" } }),
      handler: async (_args, handle) => {
        runs++;
        await handle.write("open ticket");
        if (runs === 1) throw new Error("connection lost after the write");
        return "opened";
      },
    };
    return { tool, runs: () => runs };
  }

  it("a Queryable step whose write took effect is completed from the ledger's answer, not written again", async function () {
    const { tool, runs } = flakyTicketTool("retry.ticket");
    const runtime = new Runtime(client, [tool]);
    await runtime.registerAll();
    const first = await runtime.run(tool.definition.id, { request: "T-1" }, { callId: "retry-T-1" }).catch((e: Error) => e);
    expect(first).to.be.instanceOf(Error);
    const again = await runtime.run(tool.definition.id, { request: "T-1" }, { callId: "retry-T-1" });
    expect(runs(), "the handler ran again").to.equal(1);
    expect(again.handle.callId).to.equal("retry-T-1");
    expect(await client.listPendingCalls(tool.definition.id)).to.deep.equal([]);
  });

  it("a step that already completed is answered with its outcome, its handler not run again", async function () {
    let runs = 0;
    const tool: RuntimeTool = {
      definition: defineTool({ id: "retry.charge", effect: { kind: "idempotent", key: { fields: ["/order"] } } }),
      handler: async (_args, handle) => {
        runs++;
        await handle.write("charge");
        return "charged";
      },
    };
    const runtime = new Runtime(client, [tool]);
    await runtime.registerAll();
    expect((await runtime.run(tool.definition.id, { order: "O-1" }, { callId: "retry-O-1" })).output).to.equal("charged");
    const again = await runtime.run(tool.definition.id, { order: "O-1" }, { callId: "retry-O-1" });
    expect(again.output).to.equal("charged");
    expect(runs).to.equal(1);
  });

  it("a recovery step that fails carries the refusal's code and machine-readable reason, not only a line for people", async function () {
    let refusal: KeycapClientError | undefined;
    const tool: RuntimeTool = {
      definition: defineTool({ id: "retry.lookup", effect: { kind: "idempotent", key: { fields: ["/order"] } } }),
      handler: async () => {
        // A genuine service refusal inside the handler: what recovery must report as data.
        refusal = await client.resumeCall("retry-no-such-call").then(
          () => undefined,
          (e: unknown) => KeycapClientError.from(e),
        );
        throw refusal;
      },
    };
    const runtime = new Runtime(client, [tool]);
    await runtime.registerAll();
    await runtime.run(tool.definition.id, { order: "L-1" }, { callId: "retry-L-1" }).catch(() => undefined);
    const step = (await runtime.recover({ toolIds: [tool.definition.id] })).find((s) => s.callId === "retry-L-1");
    expect(refusal, "the kernel refused the unknown call").to.be.instanceOf(KeycapClientError);
    expect(step?.result).to.equal("failed");
    expect(step?.error).to.deep.equal({ code: refusal!.codeName, reason: refusal!.reason });
    expect(step?.error?.reason).to.match(/^[A-Z_]+$/);
  });
});
