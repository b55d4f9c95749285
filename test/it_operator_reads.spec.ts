/**
 * Operator reads at volume (issue 32, item 2; DESIGN §13). GetStats counted the entries
 * collection at read time, and FerretDB answers a count by reading every document (67 s at
 * 303,744 entries; `keycap stats` gave up with "is keycap serve running" while the scans ran
 * on). Stats now come from counters kept as effects and refusals are written, and every
 * operator read carries a database-side time limit.
 *
 * The database here already holds documents the running services did not write (as after
 * an upgrade, or written by another deployment's tooling): the totals must be what these
 * services counted, read without touching those collections, and a listing that must read
 * them all is stopped at its time limit and says so.
 */
import { expect } from "chai";
import { MongoClient, ObjectId } from "mongodb";
import { AdminClient, defineTool, KernelClient, LedgerClient } from "../clients/ts/src";
import { refusal } from "./support/refusal";
import { runCli, serviceEnv, startService, type ServiceProcess } from "./support/processes";
import { scrape, sumOf } from "./support/prometheus";

const charge = defineTool({ id: "volume.charge", effect: { kind: "idempotent", key: { fields: ["/order"] } } });
const ADMIN = "volume-admin-token-0123456789";
/** Documents preloaded into each collection. */
const PRELOADED = 20_000;

describe("operator reads at volume (issue 32)", function () {
  this.timeout(300_000);
  let svc: ServiceProcess;
  let mongo: MongoClient;
  let kernel: KernelClient;
  let ledger: LedgerClient;
  const cliEnv = (): Record<string, string> => ({ KEYCAP_ADMIN_TOKEN: ADMIN, KEYCAP_ADMIN_ADDRESS: svc.endpoints.admin! });

  before(async function () {
    const env = serviceEnv({
      KEYCAP_ADMIN_TOKEN: ADMIN,
      KEYCAP_METRICS_LISTEN: "127.0.0.1:0",
      // The smallest limit: a read of every preloaded document cannot finish within it.
      KEYCAP_OPERATOR_QUERY_TIMEOUT_MS: "100",
    });
    mongo = await MongoClient.connect(env["MONGODB_URI"]!);
    const db = mongo.db(env["KEYCAP_MONGODB_DATABASE"]!);
    const at = new Date(Date.now() - 3_600_000);
    const pad = "x".repeat(300);
    for (let i = 0; i < PRELOADED; i += 2000) {
      const n = Math.min(2000, PRELOADED - i);
      await db.collection("entries").insertMany(
        Array.from({ length: n }, (_, j) => ({
          _id: `idem:preloaded-${i + j}` as unknown as ObjectId,
          entry_id: `pre-${i + j}`,
          tool_id: "volume.preloaded",
          effect: "idempotent",
          call_id: `c-${i + j}`,
          attempt: 1,
          capability_id: `cap-${i + j}`,
          key: `preloaded-${i + j}`,
          request_id: "",
          payload: Buffer.from(pad),
          payload_sha256: "0".repeat(64),
          recorded_at: at,
          payload_mismatch: false,
        })),
      );
      await db.collection("rejections").insertMany(
        Array.from({ length: n }, (_, j) => ({
          _id: new ObjectId().toHexString() as unknown as ObjectId,
          service: "ledger",
          tool_id: "volume.preloaded",
          tool_id_verified: true,
          reason: "KEY_MISMATCH",
          code: "PERMISSION_DENIED",
          message: pad,
          peer: `10.0.0.${j % 250}`,
          rejected_at: at,
          count: 1,
          n: i + j,
        })),
      );
      // Calls recovery gave up on: the indeterminate listing reads them all (by `eq_state`: in
      // proportion to the indeterminate calls, not the journal) and FerretDB sorts them in memory.
      await db.collection("calls").insertMany(
        Array.from({ length: n }, (_, j) => ({
          _id: `preloaded-call-${i + j}` as unknown as ObjectId,
          tool_id: "volume.preloaded",
          run_id: "",
          arguments_json: `{"order":"${i + j}"}`,
          effect: "unsafe",
          attempt: 1,
          state: "indeterminate",
          capability: {},
          created_at: at,
          updated_at: at,
        })),
      );
    }
    svc = await startService("all", env);
    kernel = new KernelClient(svc.endpoints.kernel!, { ledgerAddress: svc.endpoints.ledger!, coalesce: false });
    ledger = new LedgerClient(svc.endpoints.ledger!);
  });

  after(async function () {
    kernel?.close();
    ledger?.close();
    await svc?.stop();
    await mongo?.close();
  });

  it("answers keycap stats from counters: what these services wrote, counted exactly, without reading the collections", async function () {
    await kernel.registerTool(charge);
    const calls = await Promise.all(["o1", "o2"].map((order) => kernel.begin(charge.id, { order })));
    for (const c of calls) await c.write(`paid ${c.callId}`);
    await calls[0]!.write("another payload"); // a duplicate with a payload mismatch
    const mismatch = await kernel.beginCall(charge.id, JSON.stringify({ order: "o3" }));
    expect((await refusal(ledger.writeWithCapability(mismatch.capability, { key: "not-the-kernels-key" }, { retry: false }))).reason).to.equal("KEY_MISMATCH");
    expect((await refusal(ledger.writeWithCapability(undefined, { key: "k" }, { retry: false }))).reason).to.equal("CAPABILITY_MISSING");

    const aggregatesBefore = await ledgerReadCommands();
    const r = await runCli(["stats", "--json"], cliEnv());
    expect(r.code, r.stderr).to.equal(0);
    const s = JSON.parse(r.stdout) as {
      entries: number;
      duplicates: number;
      payloadMismatches: number;
      rejections: number;
      rejectionsByReason: Record<string, number>;
      rejectionsByTool: Record<string, number>;
      countedSince: string;
    };
    // Counted as written: the preloaded documents were not written by these services and
    // are not in the totals, which a count over the collections would have included.
    expect(s).to.deep.include({ entries: 2, duplicates: 1, payloadMismatches: 1, rejections: 2 });
    expect(s.rejectionsByReason).to.deep.equal({ KEY_MISMATCH: 1, CAPABILITY_MISSING: 1 });
    expect(s.rejectionsByTool).to.deep.equal({ [charge.id]: 1, "": 1 });
    expect(new Date(s.countedSince).getTime()).to.be.within(Date.now() - 300_000, Date.now());
    // And no aggregate or count command ran on the ledger's database while it answered.
    expect(await ledgerReadCommands()).to.deep.equal(aggregatesBefore);

    const table = await runCli(["stats"], cliEnv());
    expect(table.stdout).to.match(/counted since\s*│?\s*\d{4}-\d\d-\d\dT/);
  });

  it("stops a listing that must read and sort every preloaded document at its time limit, and the CLI says so (not 'is keycap serve running')", async function () {
    // No filter at all and a sort FerretDB does in memory: every refusal is read and sorted
    // (an equality filter, such as a reason, is pushed down to PostgreSQL and can be fast).
    const r = await runCli(["rejections"], cliEnv());
    expect(r.code).to.equal(1);
    expect(r.stderr).to.include("stopped the query");
    expect(r.stderr).to.include("KEYCAP_OPERATOR_QUERY_TIMEOUT_MS");
    expect(r.stderr).not.to.include("is keycap serve running");
    const admin = new AdminClient(svc.endpoints.admin!, ADMIN);
    const direct = await refusal(admin.listRejectionsPage({}, "", 10, { retry: false })).finally(() => admin.close());
    expect({ code: direct.codeName, reason: direct.reason }).to.deep.equal({ code: "DEADLINE_EXCEEDED", reason: "OPERATOR_QUERY_TIMEOUT" });
  });

  it("stops the kernel's listing of calls at the same limit, and the CLI says so", async function () {
    // 20,000 indeterminate calls, none settled: the listing must read and sort every one of them.
    const r = await runCli(["calls", "--state", "indeterminate", "--kernel", svc.endpoints.kernel!], cliEnv());
    expect(r.code, r.stderr).to.equal(1);
    expect(r.stderr).to.include("stopped the query");
    expect(r.stderr).not.to.include("is keycap serve running");
    const operator = new KernelClient(svc.endpoints.kernel!, { token: ADMIN });
    const direct = await refusal(operator.listIndeterminateCalls("", { retry: false })).finally(() => operator.close());
    expect({ code: direct.codeName, reason: direct.reason }).to.deep.equal({ code: "DEADLINE_EXCEEDED", reason: "OPERATOR_QUERY_TIMEOUT" });
  });

  /** Aggregate and count commands the ledger has sent (from its own metrics). */
  async function ledgerReadCommands(): Promise<Record<string, number>> {
    const s = await scrape(svc.endpoints.metrics!);
    const out: Record<string, number> = {};
    for (const command of ["aggregate", "count"]) {
      out[command] = sumOf(s, "keycap_mongodb_command_duration_seconds_count", { service: "ledger", command });
    }
    return out;
  }
});
