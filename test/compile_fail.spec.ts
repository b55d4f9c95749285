import { expect } from "chai";
import { execFile } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";

const FIXTURES = path.resolve(process.cwd(), "test/compile-fail");
const TSC = path.resolve(process.cwd(), "node_modules/typescript/bin/tsc");
// The project's own compiler settings (tsconfig.json), applied to one file.
const TSC_FLAGS = [
  "--noEmit",
  "--strict",
  "--noUncheckedIndexedAccess",
  "--target",
  "ES2022",
  "--module",
  "node20",
  "--skipLibCheck",
  "--esModuleInterop",
  "--types",
  "node",
  "--pretty",
  "false",
];

function tsc(file: string): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [TSC, ...TSC_FLAGS, file], { cwd: process.cwd() }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, output: stdout + stderr });
    });
  });
}

/** The source token at a tsc "(line,col)" position. */
function tokenAt(file: string, line: number, col: number): string {
  const text = fs.readFileSync(file, "utf8").split("\n")[line - 1] ?? "";
  return /^[A-Za-z_$][\w$]*/.exec(text.slice(col - 1))?.[0] ?? "";
}

describe("compile-time rule: an Idempotent tool without a key derivation does not compile (tsc on fixtures)", function () {
  this.timeout(120_000);
  const files = fs
    .readdirSync(FIXTURES)
    .filter((f) => f.endsWith(".ts"))
    .sort();

  it("has failing fixtures and a compile-pass twin", function () {
    expect(files.filter((f) => f.endsWith(".fail.ts"))).to.have.length.greaterThan(0);
    expect(files.filter((f) => f.endsWith(".pass.ts"))).to.have.length.greaterThan(0);
  });

  for (const name of files) {
    const file = path.join(FIXTURES, name);
    if (name.endsWith(".pass.ts")) {
      it(`${name} compiles (so the failing fixtures fail for the rule, not for their setup)`, async function () {
        const { code, output } = await tsc(file);
        expect(output).to.equal("");
        expect(code).to.equal(0);
      });
      continue;
    }
    it(`${name} is refused by the compiler with the expected error`, async function () {
      const expected = fs
        .readFileSync(file.replace(/\.ts$/, ".expected"), "utf8")
        .split("\n")
        .map((l) => l.trim())
        .filter((l) => l && !l.startsWith("#"));
      const { code, output } = await tsc(file);
      expect(code, output).to.not.equal(0);
      // Every error must be in the fixture itself, not in the library it imports.
      const errors = output.split("\n").filter((l) => /error TS\d+/.test(l));
      expect(errors.length).to.be.greaterThan(0);
      for (const e of errors) expect(e.startsWith(path.relative(process.cwd(), file)), e).to.equal(true);
      for (const line of expected) {
        if (line.startsWith("@at ")) {
          const m = /\((\d+),(\d+)\)/.exec(errors[0]!);
          expect(m, errors[0]).to.not.equal(null);
          expect(tokenAt(file, Number(m![1]), Number(m![2]))).to.equal(line.slice(4));
        } else {
          expect(output).to.include(line);
        }
      }
    });
  }
});
