/**
 * A service whose database has died must still stop when told to: a supervisor
 * sends SIGTERM and expects an exit within the shutdown grace, not a process
 * that hangs on writes nobody will ever acknowledge.
 */
import { expect } from "chai";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { KernelClient } from "../clients/ts/src";
import { startMongoServer, type MongoServerHandle } from "../services/common/src/embedded-mongo";
import { createLogger } from "../services/common/src/logger";
import { testMongoBackend } from "./support/mongo";
import { freePort } from "./support/ports";
import { serviceEnv, startService, type ServiceProcess } from "./support/processes";

const GRACE_MS = 1000;
/** Grace plus what a process needs to close its listeners and exit on a busy machine. */
const EXIT_WITHIN_MS = GRACE_MS + 6000;

describe("shutdown with the database gone: SIGTERM still exits within the grace", function () {
  this.timeout(120_000);
  let db: MongoServerHandle | undefined;
  let dir: string;
  const started: ServiceProcess[] = [];

  beforeEach(async function () {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-nodb-"));
    fs.chmodSync(dir, 0o755); // PostgreSQL (ferretdb-pg) runs as its own user
    const backend = testMongoBackend() === "ferretdb-pg" ? "ferretdb-pg" : "ferretdb-sqlite";
    db = await startMongoServer({
      logger: createLogger("test", "silent"),
      uri: "",
      embedded: backend,
      dataDir: path.join(dir, "mongo"),
      listen: `127.0.0.1:${await freePort()}`,
    });
  });

  afterEach(async function () {
    for (const p of started.splice(0)) await p.stop("SIGKILL").catch(() => undefined);
    await db?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  async function killDatabase(): Promise<void> {
    const handle = db!;
    db = undefined;
    process.kill(handle.pid!, "SIGKILL");
    await handle.exited;
  }

  for (const which of ["kernel", "ledger"] as const) {
    it(`${which}: calls were made, the database is SIGKILLed, a call is left waiting on it, SIGTERM → exit 0 within grace + 6 s`, async function () {
      const env = serviceEnv({ MONGODB_URI: db!.uri, KEYCAP_SHUTDOWN_GRACE_MS: String(GRACE_MS) });
      // The kernel's peer-facing half too: the ledger fetches keys from a kernel.
      const kernel = await startService("kernel", env);
      started.push(kernel);
      let client = new KernelClient(kernel.endpoints.kernel!);
      await client.registerTool({ id: "nodb.tool", effect: { kind: "idempotent", key: { fields: ["/n"] } } });
      let target = kernel;
      if (which === "ledger") {
        target = await startService("ledger", { ...env, KEYCAP_KERNEL_ADDRESS: kernel.endpoints.kernel! }, { dataDir: env["KEYCAP_DATA_DIR"]! });
        started.push(target);
      }
      if (which === "ledger") {
        client.close();
        client = new KernelClient(kernel.endpoints.kernel!, { ledgerAddress: target.endpoints.ledger! });
      }
      // Work that leaves things queued for after the answer (the kernel's pending-copy sweep).
      for (let n = 0; n < 20; n++) {
        const handle = await client.begin("nodb.tool", { n });
        if (which === "ledger") await handle.write(`p${n}`);
        await handle.complete("succeeded");
      }
      const late = await client.begin("nodb.tool", { n: 999 });
      await killDatabase();
      // A request now waits on a database that will not answer.
      const hanging = (which === "kernel" ? client.beginCall("nodb.tool", JSON.stringify({ n: 1000 })) : late.write("late")).catch(() => undefined);
      await new Promise((r) => setTimeout(r, 200));
      const t0 = Date.now();
      const code = await target.stop("SIGTERM", EXIT_WITHIN_MS);
      const ms = Date.now() - t0;
      client.close();
      await hanging;
      expect(code, target.output().slice(-2000)).to.equal(0);
      expect(ms).to.be.below(EXIT_WITHIN_MS);
    });
  }
});
