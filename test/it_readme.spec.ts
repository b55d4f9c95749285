/**
 * Issue 16, item 3: every code block of the READMEs and of the pages in docs/ is run by
 * `make test`, so none can rot. Each file's blocks run in document order (a reader follows
 * a page from the top) against one real stack of that file's own; how they are run is in
 * test/support/readme-runner.ts, what the marks mean in ADR 0012. Blocks marked
 * `no-run` show up as pending tests (so the list of what is not run is in every test
 * report); a block neither runnable nor marked fails.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { expect } from "chai";
import { codeBlocksOf, type CodeBlock } from "./support/markdown-blocks";
import { ReadmeWorkspace } from "./support/readme-runner";

/**
 * Every Markdown page directly in docs/ (the README routes there, issue 31), so a page
 * added there is run without being listed. docs/decisions/ is not read: ADRs quote
 * formats and fragments, not things to run.
 */
function docsPages(): string[] {
  return fs
    .readdirSync(path.join(process.cwd(), "docs"))
    .filter((f) => f.endsWith(".md"))
    .sort()
    .map((f) => `docs/${f}`);
}

/** The Markdown files whose code blocks are run. */
export const README_FILES = [
  "README.md",
  ...docsPages(),
  "clients/ts/README.md",
  "clients/go/README.md",
  "clients/python/README.md",
  "deploy/README.md",
  "bench/README.md",
];

function title(b: CodeBlock): string {
  const first = b.content.split("\n").find((l) => l.trim() !== "") ?? "";
  return `${b.file}:${b.line} \`\`\`${b.info || "(no info string)"} — ${first.trim().slice(0, 70)}`;
}

describe("README code blocks run as written (issue 16)", function () {
  this.timeout(600_000);

  for (const file of README_FILES) {
    describe(file, function () {
      const blocks = codeBlocksOf(path.join(process.cwd(), file), file);
      const checked = blocks.filter((b) => b.mode === "run" || b.mode === "compile-only");
      let ws: ReadmeWorkspace | undefined;

      before(async function () {
        if (checked.length > 0) ws = await ReadmeWorkspace.start(checked);
      });
      after(async () => ws?.stop());

      for (const b of blocks) {
        if (b.mode === "no-run") {
          it(`${title(b)} (marked no-run)`);
        } else if (b.mode === "unmarked") {
          it(title(b), () => expect.fail(`${b.file}:${b.line}: ${b.problem}`));
        } else {
          it(`${title(b)}${b.mode === "compile-only" ? " (compiles; marked compile-only)" : ""}`, async function () {
            const r = await ws!.check(b);
            expect(r.code, `${b.file}:${b.line} exited ${r.code}:\n${r.output}`).to.equal(0);
          });
        }
      }
    });
  }
});
