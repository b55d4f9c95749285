/**
 * Issue 14: the import-boundary lint (make lint → depcruise) must fail when a
 * boundary is crossed. Each boundary is crossed once, in a temporary copy of the
 * sources, and the lint must name the rule; the real tree must pass.
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { expect } from "chai";

const root = process.cwd();

function depcruise(cwd: string): { code: number | null; out: string } {
  const r = spawnSync(path.join(root, "node_modules", ".bin", "depcruise"), ["--config", ".dependency-cruiser.cjs", "services", "clients/ts"], {
    cwd,
    encoding: "utf8",
  });
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

describe("lint: import boundaries (issue 14)", function () {
  this.timeout(120_000);
  let copy: string;

  before(function () {
    copy = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-boundaries-"));
    for (const p of ["services", "clients/ts", "gen/ts", "tsconfig.json", "package.json", ".dependency-cruiser.cjs"]) {
      fs.cpSync(path.join(root, p), path.join(copy, p), { recursive: true });
    }
    fs.symlinkSync(path.join(root, "node_modules"), path.join(copy, "node_modules"));
  });
  after(() => fs.rmSync(copy, { recursive: true, force: true }));

  it("passes on the real tree", function () {
    const r = depcruise(root);
    expect(r.code, r.out).to.equal(0);
  });

  const plants: [string, string, string][] = [
    ["domain-is-transport-free", "services/common/src/domain/json-pointer.ts", 'import "mongodb";\n'],
    ["domain-is-transport-free", "services/ledger/src/domain/write-rule.ts", 'import "@grpc/grpc-js";\n'],
    ["errors-are-transport-free", "services/common/src/errors.ts", 'import "@grpc/grpc-js";\n'],
    ["storage-speaks-no-grpc", "services/kernel/src/call-journal.ts", 'import "@grpc/grpc-js";\n'],
    ["client-is-not-the-server", "clients/ts/src/index.ts", 'import "../../../services/common/src/errors";\n'],
    ["client-package-is-self-contained", "clients/ts/src/rpc.ts", 'import "../../../gen/ts/keycap/effect/v1/effect";\n'],
    ["ledger-cannot-mint", "services/ledger/src/main.ts", 'import "../../kernel/src/capability-minter";\n'],
    ["services-meet-at-entry-points", "services/gateway/src/gateway.ts", 'import "../../sink/src/http-sink";\n'],
    ["services-meet-at-entry-points", "services/ledger/src/ledger.ts", 'import "../../capability/src/verifier";\n'],
    ["service-logic-is-wire-free", "services/kernel/src/kernel.ts", 'import "@grpc/grpc-js";\n'],
    ["service-logic-is-wire-free", "services/ledger/src/ledger.ts", 'import "../../../gen/ts/keycap/ledger/v1/ledger";\n'],
    ["services-use-the-client-package-entry", "services/common/src/insert-batcher.ts", 'import "../../../clients/ts/src/turn-batches";\n'],
    ["common-is-the-ground-floor", "services/common/src/config.ts", 'import "../../capability/src";\n'],
    ["capability-stands-on-common-only", "services/capability/src/verifier.ts", 'import "../../ledger/src/main";\n'],
  ];
  for (const [rule, file, line] of plants) {
    it(`fails with ${rule} when ${file} gets ${line.trim()}`, function () {
      const target = path.join(copy, file);
      const original = fs.readFileSync(target, "utf8");
      fs.writeFileSync(target, original + line);
      try {
        const r = depcruise(copy);
        expect(r.code, r.out).to.not.equal(0);
        expect(r.out).to.include(`error ${rule}: ${file}`);
      } finally {
        fs.writeFileSync(target, original);
      }
    });
  }
});
