/**
 * The code blocks of a Markdown file, found by a Markdown parser (markdown-it), and
 * what `make test` does with each (ADR 0012): run it, compile it only, or leave it
 * alone because the Markdown says so. A block is left alone only when its info
 * string says `no-run` (` ```sh no-run `); a block that is neither runnable nor
 * marked is an error, so a new snippet cannot slip in untested.
 */
import * as fs from "node:fs";
import MarkdownIt from "markdown-it";

/** The languages the README test can execute, by the info string's first word. */
export const RUNNABLE_LANGUAGES = {
  ts: "ts",
  typescript: "ts",
  go: "go",
  python: "python",
  py: "python",
  sh: "sh",
  bash: "sh",
  shell: "sh",
} as const;

export type BlockLanguage = (typeof RUNNABLE_LANGUAGES)[keyof typeof RUNNABLE_LANGUAGES];

/**
 * - `run`: executed against the test's services, must exit 0;
 * - `compile-only` (ts, go, python): type-checked or compiled, not executed (a snippet
 *   that needs hosts or certificates the reader has and the test has not);
 * - `no-run`: listed by the test, not executed (`make run`, install commands, output
 *   samples, diagrams);
 * - `unmarked`: neither runnable nor marked; the test fails on it.
 */
export type BlockMode = "run" | "compile-only" | "no-run" | "unmarked";

export interface CodeBlock {
  file: string;
  /** 1-based line of the opening fence. */
  line: number;
  /** The info string as written (` ```sh no-run ` → "sh no-run"). */
  info: string;
  /** The runnable language, when the first word of the info string names one. */
  language: BlockLanguage | undefined;
  mode: BlockMode;
  /** Why the block is `unmarked`, for the failure message. */
  problem?: string;
  content: string;
}

/** What the info string of a block says the test should do with it. */
export function classifyBlock(info: string, fenced: boolean): Pick<CodeBlock, "language" | "mode" | "problem"> {
  const words = info.trim().split(/\s+/).filter(Boolean);
  const first = words[0]?.toLowerCase();
  const language = first !== undefined && Object.hasOwn(RUNNABLE_LANGUAGES, first) ? RUNNABLE_LANGUAGES[first as keyof typeof RUNNABLE_LANGUAGES] : undefined;
  const marks = words.slice(1);
  if (!fenced) {
    return {
      language: undefined,
      mode: "unmarked",
      problem: "an indented code block cannot carry a mark: fence it with ``` and a language, or ```text no-run",
    };
  }
  if (marks.includes("no-run")) return { language, mode: "no-run" };
  if (marks.includes("compile-only")) {
    if (language === "go" || language === "ts" || language === "python") return { language, mode: "compile-only" };
    return { language, mode: "unmarked", problem: `compile-only applies to ts, go and python blocks, not ${JSON.stringify(first ?? "")}` };
  }
  if (language === undefined) {
    const what = first === undefined ? "a block with no language" : `a ${first} block`;
    return {
      language,
      mode: "unmarked",
      problem: `${what} cannot be run: give it a runnable language (${Object.keys(RUNNABLE_LANGUAGES).join(", ")}) or mark it no-run`,
    };
  }
  return { language, mode: "run" };
}

/** Every code block of a Markdown text, fenced or indented, in document order. */
export function codeBlocks(file: string, markdown: string): CodeBlock[] {
  const tokens = new MarkdownIt({ html: true }).parse(markdown, {});
  const out: CodeBlock[] = [];
  for (const t of tokens) {
    if (t.type !== "fence" && t.type !== "code_block") continue;
    const info = t.type === "fence" ? t.info : "";
    out.push({ file, line: (t.map?.[0] ?? 0) + 1, info, content: t.content, ...classifyBlock(info, t.type === "fence") });
  }
  return out;
}

/** The code blocks of a Markdown file. */
export function codeBlocksOf(file: string, displayName = file): CodeBlock[] {
  return codeBlocks(displayName, fs.readFileSync(file, "utf8"));
}
