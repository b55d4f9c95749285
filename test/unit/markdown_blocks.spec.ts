import { expect } from "chai";
import { codeBlocks } from "../support/markdown-blocks";

const md = [
  "# Title",
  "",
  "```sh",
  "echo run me",
  "```",
  "",
  "```sh no-run",
  "make run",
  "```",
  "",
  "```go compile-only",
  "package main",
  "```",
  "",
  "```",
  " a diagram",
  "```",
  "",
  "```sh compile-only",
  "echo hi",
  "```",
  "",
  "    indented code",
  "",
  "~~~python",
  "print('tilde fence')",
  "~~~",
  "",
  "Inline `code` is not a block. A fence inside a list:",
  "",
  "- item",
  "",
  "  ```ts",
  "  const x = 1;",
  "  ```",
].join("\n");

describe("README code blocks: what the Markdown says the test does with each (ADR 0012)", function () {
  const blocks = codeBlocks("x.md", md);

  it("finds every fenced and indented block, with the line of its fence", function () {
    expect(blocks.map((b) => b.line)).to.deep.equal([3, 7, 11, 15, 19, 23, 25, 33]);
  });

  it("runs a block in a runnable language, compiles a compile-only one, leaves a no-run one", function () {
    expect(blocks.map((b) => [b.language, b.mode])).to.deep.equal([
      ["sh", "run"],
      ["sh", "no-run"],
      ["go", "compile-only"],
      [undefined, "unmarked"],
      ["sh", "unmarked"],
      [undefined, "unmarked"],
      ["python", "run"],
      ["ts", "run"],
    ]);
  });

  it("says why an unmarked block fails: no language, compile-only on a shell block, an indented block", function () {
    expect(blocks[3]!.problem).to.match(/no language cannot be run.*no-run/);
    expect(blocks[4]!.problem).to.match(/compile-only applies to ts, go and python/);
    expect(blocks[5]!.problem).to.match(/indented code block cannot carry a mark/);
  });
});
