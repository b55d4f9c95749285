/**
 * Issue 16: `make run` after `make run` must not regenerate and recompile an unchanged
 * tree (it took 8-16 s per restart). The Makefile's targets are file-based; make's own
 * dry run (-n, with -W to pretend a file changed) shows what it would do, without a clock.
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { projectRoot } from "../services/common/src/repo-paths";

function make(...args: string[]): string {
  const env = { ...process.env };
  // Not the jobserver of a make that runs this suite.
  delete env["MAKEFLAGS"];
  delete env["MFLAGS"];
  delete env["MAKELEVEL"];
  const r = spawnSync("make", ["--no-print-directory", ...args], { cwd: projectRoot(), env, encoding: "utf8", timeout: 300_000 });
  if (r.status !== 0) throw new Error(`make ${args.join(" ")} exited ${r.status}: ${r.stdout}${r.stderr}`);
  return r.stdout + r.stderr;
}

const TSC = /npx tsc -p tsconfig\.json/;
const GENERATE = /npm run --silent generate/;

describe("make: an unchanged tree is not rebuilt (issue 16)", function () {
  this.timeout(360_000);

  before(function () {
    // Brings the stamps up to date (a no-op when make test has just built).
    make("build");
  });

  it("make build after a build runs neither the generator nor tsc", function () {
    const out = make("build");
    expect(out).to.not.match(TSC);
    expect(out).to.not.match(GENERATE);
    expect(out).to.contain("Nothing to be done for 'build'");
  });

  it("make run goes straight to serving", function () {
    const planned = make("-n", "run").trim().split("\n");
    // make run also serves the web console, the HTTP effect gateway and the metrics on loopback unless the environment says otherwise.
    expect(planned).to.deep.equal([
      'KEYCAP_CONSOLE_LISTEN=${KEYCAP_CONSOLE_LISTEN:-127.0.0.1:50054} KEYCAP_GATEWAY_LISTEN=${KEYCAP_GATEWAY_LISTEN:-127.0.0.1:50055} KEYCAP_METRICS_LISTEN="${KEYCAP_METRICS_LISTEN-127.0.0.1:9464}" node dist/services/cli/src/main.js serve all',
    ]);
  });

  it("a changed TypeScript file recompiles without regenerating; a changed proto does both, saying so", function () {
    const ts = make("-n", "-W", "services/common/src/config.ts", "build");
    expect(ts).to.match(TSC);
    expect(ts).to.not.match(GENERATE);
    const proto = make("-n", "-W", "proto/keycap/kernel/v1/kernel.proto", "build");
    expect(proto).to.match(GENERATE);
    expect(proto).to.match(TSC);
    expect(proto).to.match(/generating code from proto\/ .*about 30 s/);
  });
});
