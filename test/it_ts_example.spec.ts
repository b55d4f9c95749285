/**
 * Issue 16, item 6: the TypeScript example (clients/ts/examples/charge.ts) charges once
 * however often it runs, and when a service is down it says in one line what it could
 * not reach and which setting names it, and exits non-zero: no stack trace.
 */
import * as path from "node:path";
import { expect } from "chai";
import { freePort } from "./support/ports";
import { serviceEnv, startService, type ServiceProcess } from "./support/processes";
import { run } from "./support/readme-runner";

const EXAMPLE = path.join(process.cwd(), "dist", "clients", "ts", "examples", "charge.js");

function example(env: Record<string, string>, ...args: string[]): ReturnType<typeof run> {
  return run(process.execPath, [EXAMPLE, ...args], { cwd: process.cwd(), env: { PATH: process.env["PATH"] ?? "", ...env }, timeoutMs: 30_000 });
}

describe("the TypeScript example (issue 16)", function () {
  let stack: ServiceProcess;

  before(async function () {
    stack = await startService("all", serviceEnv());
  });
  after(async () => stack?.stop());

  const up = (): Record<string, string> => ({
    KEYCAP_KERNEL_ADDRESS: stack.endpoints.kernel!,
    KEYCAP_LEDGER_ADDRESS: stack.endpoints.ledger!,
    KEYCAP_RUNTIME_TOKEN: stack.env["KEYCAP_RUNTIME_TOKEN"]!,
  });

  it("charges an order once: the second run's write is the same entry, flagged duplicate", async function () {
    const first = await example(up(), "order-ex-1");
    expect(first.code, first.output).to.equal(0);
    const entry = /^charged: entry (\S+) key (\S+)$/m.exec(first.output);
    expect(entry, first.output).to.not.equal(null);
    const second = await example(up(), "order-ex-1");
    expect(second.code, second.output).to.equal(0);
    expect(second.output).to.include(`already charged (duplicate): entry ${entry![1]} key ${entry![2]}`);
  });

  it("with the kernel down, prints one line naming the address and KEYCAP_KERNEL_ADDRESS, and exits 1", async function () {
    const nobody = `127.0.0.1:${await freePort()}`;
    const r = await example({ ...up(), KEYCAP_KERNEL_ADDRESS: nobody }, "order-ex-2");
    expect(r.code, r.output).to.equal(1);
    expect(r.output.trim().split("\n"), r.output).to.have.length(1);
    expect(r.output).to.include(nobody).and.include("KEYCAP_KERNEL_ADDRESS");
    expect(r.output).to.not.match(/^\s+at /m);
  });

  it("with the ledger down, prints one line naming the address and KEYCAP_LEDGER_ADDRESS, and exits 1", async function () {
    const nobody = `127.0.0.1:${await freePort()}`;
    const r = await example({ ...up(), KEYCAP_LEDGER_ADDRESS: nobody }, "order-ex-3");
    expect(r.code, r.output).to.equal(1);
    expect(r.output.trim().split("\n"), r.output).to.have.length(1);
    expect(r.output).to.include(nobody).and.include("KEYCAP_LEDGER_ADDRESS");
    expect(r.output).to.not.match(/^\s+at /m);
  });
});
