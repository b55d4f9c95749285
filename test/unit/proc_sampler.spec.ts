/**
 * The bench's "db" CPU is the database server's whole process tree: FerretDB on
 * PostgreSQL does its SQL work in postgres backends, children of the FerretDB wrapper's
 * postmaster. Sampling the wrapper's pid alone reported only FerretDB's own share.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { expect } from "chai";
import { cpuSecondsOf, ProcSampler } from "../../bench/proc-sampler";

/**
 * A parent that sleeps while its child and grandchild each spin until they have used
 * `seconds` of CPU (not of wall time: a loaded machine gives less CPU per second, and the
 * test must not depend on load) and exit; it prints "done" once its child has exited, then
 * idles until killed.
 */
function idleParentOfBusyTree(seconds: number): ChildProcess {
  const spin = `const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; }; while (cpu() < ${seconds}) {}`;
  const child = `require("node:child_process").spawn(process.execPath, ["-e", ${JSON.stringify(spin)}], { stdio: "ignore" }).on("exit", () => process.exit(0)); ${spin}`;
  const parent = `require("node:child_process").spawn(process.execPath, ["-e", ${JSON.stringify(child)}], { stdio: "ignore" }).on("exit", () => { process.stdout.write("done"); setInterval(() => {}, 1000); })`;
  return spawn(process.execPath, ["-e", parent], { stdio: ["ignore", "pipe", "ignore"] });
}

describe("bench proc sampler: a process tree's CPU", function () {
  this.timeout(30_000);
  if (process.platform !== "linux") return;

  it("counts the CPU of descendants (including ones that exited) for a tree-sampled name, only the pid's own otherwise", async function () {
    const parent = idleParentOfBusyTree(0.8);
    const pid = parent.pid!;
    const sampler = new ProcSampler({ tree: pid, alone: pid }, 50, new Set(["tree"]));
    sampler.start();
    await once(parent.stdout!, "data");
    // Both spinners have exited and been reaped: their CPU is in their parents' cutime/cstime.
    const used = sampler.stop();
    parent.kill("SIGKILL");
    // Each spinner used at least 0.8 s of CPU; /proc counts in 10 ms ticks.
    expect(used["tree"]!.cpuSeconds, "descendants' CPU (child + grandchild used 0.8 s each)").to.be.greaterThan(1.55);
    expect(used["alone"]!.cpuSeconds ?? 0, "the idle parent alone").to.be.lessThan(0.6);
    expect(cpuSecondsOf(process.pid)).to.be.a("number");
  });
});
