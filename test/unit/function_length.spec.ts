/**
 * Issue 31 item 3: no function over 80 lines in product code (services/ and clients/ts/src),
 * measured by the TypeScript parser, so a function that grows past it fails here with its
 * name and place rather than in a reviewer's head. Examples and generated code are not
 * product code.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { expect } from "chai";
import ts from "typescript";

const MAX_LINES = 80;
const ROOTS = ["services", "clients/ts/src"];

function sourceFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const full = path.join(dir, e.name);
    if (e.isDirectory()) return e.name === "examples" || e.name === "node_modules" ? [] : sourceFiles(full);
    return e.name.endsWith(".ts") && !e.name.endsWith(".d.ts") ? [full] : [];
  });
}

interface LongFunction {
  where: string;
  name: string;
  lines: number;
}

function longFunctions(file: string): LongFunction[] {
  const source = ts.createSourceFile(file, fs.readFileSync(file, "utf8"), ts.ScriptTarget.Latest, true);
  const found: LongFunction[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && "body" in node && node.body !== undefined) {
      const start = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
      const end = source.getLineAndCharacterOfPosition(node.getEnd()).line;
      const lines = end - start + 1;
      if (lines > MAX_LINES) {
        const name = node.name && ts.isIdentifier(node.name) ? node.name.text : "(anonymous)";
        found.push({ where: `${file}:${start + 1}`, name, lines });
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

describe("product code: no function over 80 lines (issue 31)", () => {
  it("holds for every function, method and arrow in services/ and clients/ts/src", () => {
    const files = ROOTS.flatMap((r) => sourceFiles(path.join(process.cwd(), r)));
    expect(files.length).to.be.greaterThan(100);
    const long = files.flatMap(longFunctions).map((f) => ({ ...f, where: path.relative(process.cwd(), f.where) }));
    expect(long, long.map((f) => `${f.where} ${f.name}: ${f.lines} lines`).join("\n")).to.deep.equal([]);
  });

  it("would see one: a 90-line function is found", () => {
    const dir = fs.mkdtempSync(path.join(process.env["TMPDIR"] ?? "/tmp", "fnlen-"));
    const file = path.join(dir, "long.ts");
    fs.writeFileSync(file, `export function long(): number {\n${"  let x = 1;\n".repeat(88)}  return 1;\n}\n`);
    try {
      expect(longFunctions(file).map((f) => [f.name, f.lines])).to.deep.equal([["long", 91]]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
