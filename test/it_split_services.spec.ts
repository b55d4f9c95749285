/**
 * Issue 16: kernel and ledger run as separate processes (`keycap serve kernel`,
 * `keycap serve ledger`), the way a deployment that scales them apart runs them.
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { defineTool, KernelClient } from "../clients/ts/src";
import { healthCheck } from "./support/grpc-probes";
import { freePort } from "./support/ports";
import { refusal } from "./support/refusal";
import { runCli, serviceEnv, startService } from "./support/processes";

/** The default configuration apart from free ports: no MONGODB_URI, the default database name. */
function defaultEnv(): Record<string, string> {
  const env = serviceEnv();
  delete env["MONGODB_URI"];
  delete env["KEYCAP_MONGODB_DATABASE"];
  return env;
}

interface Stats {
  entries: number;
  rejections: number;
}

async function stats(env: Record<string, string>, admin: string): Promise<Stats> {
  const r = await runCli(["stats", "--admin", admin, "--json"], env);
  if (r.code !== 0) throw new Error(`keycap stats exited ${r.code}: ${r.stderr}`);
  return JSON.parse(r.stdout) as Stats;
}

async function statsEntries(env: Record<string, string>, admin: string): Promise<number> {
  return (await stats(env, admin)).entries;
}

describe("kernel and ledger as separate processes (issue 16)", function () {
  this.timeout(120_000);

  it("a ledger started before its kernel refuses with UNAVAILABLE naming the cause, and the first write after the kernel is healthy succeeds within a second", async function () {
    const kernelPort = await freePort();
    const env = serviceEnv({ KEYCAP_KERNEL_LISTEN: `127.0.0.1:${kernelPort}` });
    const ledger = await startService("ledger", env);
    let kernel: Awaited<ReturnType<typeof startService>> | undefined;
    const early = await startService("kernel", { ...env, KEYCAP_KERNEL_LISTEN: "127.0.0.1:0" });
    // A capability signed with the key the real kernel will publish (same data directory):
    // minted by a short-lived kernel on another port, which the ledger never asks.
    const c0 = new KernelClient(early.endpoints.kernel!, { ledgerAddress: ledger.endpoints.ledger! });
    try {
      const tool = defineTool({ id: "split.late-kernel", effect: { kind: "idempotent", key: { fields: ["/n"] } } });
      await c0.registerTool(tool);
      const first = await c0.begin(tool.id, { n: 1 });
      const second = await c0.begin(tool.id, { n: 2 });
      await early.stop();

      const e = await refusal(first.write("x", { retry: false }));
      expect([e.codeName, e.reason]).to.deep.equal(["UNAVAILABLE", "SIGNING_KEYS_UNAVAILABLE"]);
      // The real cause (the kernel's port refuses connections), not a bare "fetch failed".
      expect(e.message).to.match(new RegExp(`127\\.0\\.0\\.1:${kernelPort}.*ECONNREFUSED`));
      expect(ledger.output()).to.contain("cannot fetch the kernel's signing keys");
      expect(ledger.output()).to.contain("ECONNREFUSED");

      kernel = await startService("kernel", env);
      expect(await healthCheck(`127.0.0.1:${kernelPort}`)).to.equal("SERVING");
      const healthyAt = Date.now();
      // No client retries: the ledger itself must know the keys (or fetch them) by now.
      const written = await second.write("y", { retry: false, timeoutMs: 5000 });
      expect(written.duplicate).to.equal(false);
      expect(Date.now() - healthyAt, "first write after the kernel is healthy").to.be.below(1000);
      const again = await first.write("x", { retry: false });
      expect(again.duplicate).to.equal(false);
    } finally {
      c0.close();
      await early.stop();
      await kernel?.stop();
      await ledger.stop();
    }
  });

  it("serve kernel and serve ledger started apart with the default configuration share one embedded database, which outlives the process that started it", async function () {
    this.timeout(400_000);
    const env = defaultEnv();
    // Left behind by a keycap that was SIGKILLed: a lock and a record naming dead processes.
    const dead = spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"]).stdout.toString();
    fs.mkdirSync(path.join(env["KEYCAP_DATA_DIR"]!, "mongo"));
    fs.writeFileSync(path.join(env["KEYCAP_DATA_DIR"]!, "mongo", "server.lock"), dead);
    fs.writeFileSync(
      path.join(env["KEYCAP_DATA_DIR"]!, "mongo", "server.json"),
      JSON.stringify({ uri: "mongodb://127.0.0.1:1/", backend: "ferretdb-sqlite", reason: "", pid: Number(dead), ownerPid: Number(dead) }),
    );
    // The first start may build FerretDB (or make a PostgreSQL cluster): give it time.
    let kernel = await startService("kernel", env, { readyTimeoutMs: 300_000 });
    const ledgerEnv = { ...env, KEYCAP_KERNEL_ADDRESS: kernel.endpoints.kernel! };
    const ledger = await startService("ledger", ledgerEnv, { readyTimeoutMs: 60_000 });
    let client = new KernelClient(kernel.endpoints.kernel!, { ledgerAddress: ledger.endpoints.ledger! });
    try {
      expect(kernel.output()).to.match(/mongodb +mongodb:\/\/127\.0\.0\.1:\d+\/ \(embedded, shared/);
      expect(ledger.output()).to.contain(`using the embedded MongoDB that process ${kernel.child.pid} started`);
      const tool = defineTool({ id: "split.charge", effect: { kind: "idempotent", key: { fields: ["/order"] } } });
      await client.registerTool(tool);
      for (const order of ["o-1", "o-2"]) {
        const h = await client.begin(tool.id, { order });
        await h.write(order);
        await h.complete("succeeded");
      }
      // A refusal the kernel records: with one database the ledger's admin API counts it too.
      const stranger = new KernelClient(kernel.endpoints.kernel!, { token: "keycap_rt_not-a-real-secret-000000" });
      expect((await refusal(stranger.begin(tool.id, { order: "o-9" }))).codeName).to.equal("UNAUTHENTICATED");
      stranger.close();
      // Totals are counters each process writes about once a second (ADR 0025): the kernel's
      // refusal is in the ledger's GetStats within that, not necessarily at once.
      let totals = await stats(env, ledger.endpoints.admin!);
      for (let i = 0; i < 20 && totals.rejections < 1; i++) {
        await new Promise((r) => setTimeout(r, 250));
        totals = await stats(env, ledger.endpoints.admin!);
      }
      expect(totals).to.include({ entries: 2, rejections: 1 });

      // The kernel started the server; when it stops, the ledger starts it again on the same
      // address and data files, and nothing is lost.
      await kernel.stop();
      let seen: number | undefined;
      for (let i = 0; i < 40 && seen === undefined; i++) {
        seen = await statsEntries(env, ledger.endpoints.admin!).catch(() => undefined);
        if (seen === undefined) await new Promise((r) => setTimeout(r, 500));
      }
      expect(seen, "entries after the owner stopped").to.equal(2);
      expect(ledger.output()).to.contain("the shared embedded MongoDB had exited; started it again");

      kernel = await startService("kernel", env, { readyTimeoutMs: 60_000 });
      expect(kernel.output()).to.contain(`using the embedded MongoDB that process ${ledger.child.pid} started`);
      client.close();
      client = new KernelClient(kernel.endpoints.kernel!, { ledgerAddress: ledger.endpoints.ledger! });
      const h = await client.begin(tool.id, { order: "o-3" });
      await h.write("o-3", { timeoutMs: 20_000 });
      expect(await statsEntries(env, ledger.endpoints.admin!)).to.equal(3);
    } finally {
      client.close();
      await kernel.stop();
      await ledger.stop();
    }
  });
});
