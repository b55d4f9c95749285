/**
 * Runs README code blocks as a reader would (ADR 0012), against a real stack started
 * for them:
 *
 * - the working directory is a "repo root" of their own: a temporary folder holding a
 *   symlink to each top-level entry of the repository and its own `.keycap/` with the
 *   stack's runtime and admin tokens, which is where `make run` leaves them;
 * - the stack listens on free ports, not 50051-50053: every block has the three default
 *   addresses rewritten to the stack's, and the environment names them
 *   (KEYCAP_KERNEL_ADDRESS, KEYCAP_LEDGER_ADDRESS, KEYCAP_ADMIN_ADDRESS: what the CLI and
 *   the examples read), nothing else of keycap's;
 * - TypeScript blocks are compiled with the project's TypeScript (strict) in an
 *   application of their own that has `@keycap/client` installed as a folder
 *   dependency (the way `npm install <repo>/clients/ts` does: a link), then run by node;
 * - Go blocks each become `package main` of a module that requires the client with a
 *   `replace` to clients/go (its go.sum), built, then run;
 * - Python blocks run in the client's venv (clients/python/venv.sh, the one its test
 *   suite uses), whose `bin/` also leads PATH for shell blocks (as an activated venv);
 * - shell blocks run under `bash -euo pipefail`, with grpcurl (pinned, the Go suite's
 *   cache) on PATH.
 */
import { spawn } from "node:child_process";
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import type { CodeBlock } from "./markdown-blocks";
import { serviceEnv, startService, TEST_RUNTIME_TOKEN, type ServiceProcess } from "./processes";

export interface RunResult {
  code: number | null;
  output: string;
}

const ROOT = process.cwd();
const GRPCURL = { pkg: "github.com/fullstorydev/grpcurl/cmd/grpcurl", version: "v1.9.4" };

/**
 * Runs a command to completion, stdout and stderr interleaved, in a process group of its
 * own: on exit or timeout the whole group is killed, so nothing a block started (a server
 * it left in the background, a `make run` that never exits) outlives it.
 */
export function run(cmd: string, args: string[], opts: { cwd: string; env: NodeJS.ProcessEnv; timeoutMs?: number }): Promise<RunResult> {
  const timeoutMs = opts.timeoutMs ?? 180_000;
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env, stdio: ["ignore", "pipe", "pipe"], detached: true });
    let output = "";
    child.stdout.on("data", (d: Buffer) => (output += d.toString()));
    child.stderr.on("data", (d: Buffer) => (output += d.toString()));
    const killGroup = (): void => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
      } catch {
        // the group is already gone
      }
    };
    const timer = setTimeout(() => {
      output += `\n[killed after ${timeoutMs} ms]`;
      killGroup();
    }, timeoutMs);
    child.once("error", (err) => {
      clearTimeout(timer);
      resolve({ code: null, output: `${output}${err.message}` });
    });
    // "close" comes once every holder of its pipes is gone, which the group kill ensures.
    child.once("exit", () => killGroup());
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

function blockName(b: CodeBlock): string {
  return `b${b.line}`;
}

/** The compile step's verdict for one block: undefined when it compiled. */
type Diagnostics = Map<CodeBlock, string>;

/** One Markdown file's blocks, the stack they run against and their compiled forms. */
export class ReadmeWorkspace {
  private readonly compileErrors: Diagnostics = new Map();
  private pythonBin = "";

  private constructor(
    readonly dir: string,
    readonly repoRoot: string,
    readonly stack: ServiceProcess,
    readonly env: NodeJS.ProcessEnv,
  ) {}

  /** Starts a stack and prepares (compiles) every block of `blocks` that is run or compiled. */
  static async start(blocks: CodeBlock[]): Promise<ReadmeWorkspace> {
    const adminToken = crypto.randomBytes(24).toString("base64url");
    const stack = await startService("all", serviceEnv({ KEYCAP_ADMIN_TOKEN: adminToken, KEYCAP_GATEWAY_LISTEN: "127.0.0.1:0" }));
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-readme-"));
    const repoRoot = path.join(dir, "repo");
    fs.mkdirSync(repoRoot);
    for (const entry of fs.readdirSync(ROOT)) {
      if (entry === ".keycap" || entry === ".git") continue;
      fs.symlinkSync(path.join(ROOT, entry), path.join(repoRoot, entry));
    }
    fs.mkdirSync(path.join(repoRoot, ".keycap"), { mode: 0o700 });
    fs.writeFileSync(path.join(repoRoot, ".keycap", "runtime-token"), TEST_RUNTIME_TOKEN + "\n", { mode: 0o600 });
    fs.writeFileSync(path.join(repoRoot, ".keycap", "admin-token"), adminToken + "\n", { mode: 0o600 });

    const env: NodeJS.ProcessEnv = {};
    for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("KEYCAP_") && k !== "MONGODB_URI") env[k] = v;
    env["KEYCAP_KERNEL_ADDRESS"] = stack.endpoints.kernel!;
    env["KEYCAP_LEDGER_ADDRESS"] = stack.endpoints.ledger!;
    env["KEYCAP_ADMIN_ADDRESS"] = stack.endpoints.admin!;
    env["KEYCAP_GATEWAY_ADDRESS"] = stack.endpoints.gateway!;
    env["GOWORK"] = "off";
    const ws = new ReadmeWorkspace(dir, repoRoot, stack, env);
    try {
      const needs = (lang: string): CodeBlock[] => blocks.filter((b) => b.language === lang && (b.mode === "run" || b.mode === "compile-only"));
      const shell = needs("sh");
      if (needs("python").length > 0 || shell.some((b) => /\bpython3?\b/.test(b.content))) await ws.preparePython();
      if (shell.some((b) => /\bgrpcurl\b/.test(b.content))) await ws.prepareGrpcurl();
      await ws.compileTs(needs("ts"));
      await ws.compileGo(needs("go"));
      await ws.compilePython(needs("python"));
    } catch (err) {
      await ws.stop();
      throw err;
    }
    return ws;
  }

  async stop(): Promise<void> {
    await this.stack.stop("SIGTERM").catch(() => this.stack.stop("SIGKILL").catch(() => undefined));
    fs.rmSync(this.dir, { recursive: true, force: true });
  }

  /** The block as the test runs it: the default addresses rewritten to the stack's. */
  source(b: CodeBlock): string {
    const e = this.stack.endpoints;
    return b.content
      .replaceAll("127.0.0.1:50051", e.kernel!)
      .replaceAll("127.0.0.1:50052", e.ledger!)
      .replaceAll("127.0.0.1:50053", e.admin!)
      .replaceAll("127.0.0.1:50055", e.gateway!);
  }

  /** Compiles (ts, go, python) and, unless compile-only, executes the block. */
  async check(b: CodeBlock): Promise<RunResult> {
    const err = this.compileErrors.get(b);
    if (err !== undefined) return { code: 1, output: `does not compile:\n${err}` };
    if (b.mode === "compile-only") return { code: 0, output: "" };
    const opts = { cwd: this.repoRoot, env: this.env };
    switch (b.language) {
      case "ts":
        return run(process.execPath, [path.join(this.dir, "ts", "dist", `${blockName(b)}.js`)], opts);
      case "go":
        return run(path.join(this.dir, "go", "bin", blockName(b)), [], opts);
      case "python":
        return run(this.pythonBin, [path.join(this.dir, "py", `${blockName(b)}.py`)], opts);
      case "sh": {
        const file = path.join(this.dir, `${blockName(b)}.sh`);
        fs.writeFileSync(file, this.source(b));
        return run("bash", ["-euo", "pipefail", file], opts);
      }
      default:
        return { code: 1, output: `no runner for ${b.info}` };
    }
  }

  private async preparePython(): Promise<void> {
    const r = await run("bash", ["-c", 'source clients/python/venv.sh >&2 && printf "%s" "$PY"'], { cwd: ROOT, env: process.env, timeoutMs: 600_000 });
    if (r.code !== 0) throw new Error(`clients/python/venv.sh failed:\n${r.output}`);
    this.pythonBin = r.output.trim().split("\n").pop()!;
    this.env["PATH"] = `${path.dirname(this.pythonBin)}${path.delimiter}${this.env["PATH"] ?? ""}`;
    this.env["VIRTUAL_ENV"] = path.dirname(path.dirname(this.pythonBin));
  }

  /** grpcurl where the Go suite's stock-tool tests install it (same pin, same folder). */
  private async prepareGrpcurl(): Promise<void> {
    const cache = process.env["KEYCAP_CACHE_DIR"] ?? path.join(os.homedir(), ".cache", "keycap");
    const bin = path.join(cache, "gotools", `grpcurl@${GRPCURL.version}`);
    if (!fs.existsSync(path.join(bin, "grpcurl"))) {
      const r = await run("go", ["install", `${GRPCURL.pkg}@${GRPCURL.version}`], {
        cwd: ROOT,
        env: { ...process.env, GOBIN: bin, GOFLAGS: "-mod=mod", GOWORK: "off" },
        timeoutMs: 600_000,
      });
      if (r.code !== 0) throw new Error(`go install grpcurl failed:\n${r.output}`);
    }
    this.env["PATH"] = `${bin}${path.delimiter}${this.env["PATH"] ?? ""}`;
  }

  private async compileTs(blocks: CodeBlock[]): Promise<void> {
    if (blocks.length === 0) return;
    const app = path.join(this.dir, "ts");
    fs.mkdirSync(path.join(app, "node_modules", "@keycap"), { recursive: true });
    // The client package, built from its own folder (as `npm run build` there does).
    const built = await run(process.execPath, [path.join(ROOT, "node_modules", "typescript", "bin", "tsc"), "-p", path.join(ROOT, "clients", "ts")], {
      cwd: ROOT,
      env: process.env,
    });
    if (built.code !== 0) throw new Error(`clients/ts does not build:\n${built.output}`);
    fs.symlinkSync(path.join(ROOT, "clients", "ts"), path.join(app, "node_modules", "@keycap", "client"));
    fs.writeFileSync(path.join(app, "package.json"), JSON.stringify({ name: "readme-app", private: true, type: "commonjs" }));
    fs.writeFileSync(
      path.join(app, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          target: "ES2022",
          module: "node20",
          moduleResolution: "node16",
          strict: true,
          noUncheckedIndexedAccess: true,
          esModuleInterop: true,
          skipLibCheck: true,
          moduleDetection: "force",
          outDir: "dist",
          rootDir: ".",
          types: ["node"],
          typeRoots: [path.join(ROOT, "node_modules", "@types")],
        },
        include: ["*.ts"],
      }),
    );
    for (const b of blocks) fs.writeFileSync(path.join(app, `${blockName(b)}.ts`), this.source(b));
    const r = await run(process.execPath, [path.join(ROOT, "node_modules", "typescript", "bin", "tsc"), "-p", app, "--pretty", "false"], {
      cwd: app,
      env: process.env,
    });
    if (r.code === 0) return;
    for (const b of blocks) {
      const mine = r.output.split("\n").filter((l) => l.startsWith(`${blockName(b)}.ts(`));
      if (mine.length > 0) this.compileErrors.set(b, mine.join("\n"));
    }
    if (!blocks.some((b) => this.compileErrors.has(b))) throw new Error(`tsc failed:\n${r.output}`);
  }

  private async compileGo(blocks: CodeBlock[]): Promise<void> {
    if (blocks.length === 0) return;
    const mod = path.join(this.dir, "go");
    const client = path.join(ROOT, "clients", "go");
    const goLine = /^go \S+$/m.exec(fs.readFileSync(path.join(client, "go.mod"), "utf8"))?.[0] ?? "go 1.26.0";
    fs.mkdirSync(mod);
    fs.writeFileSync(
      path.join(mod, "go.mod"),
      `module keycap.example/readme\n\n${goLine}\n\nrequire github.com/keycap/keycap/clients/go v0.0.0\n\nreplace github.com/keycap/keycap/clients/go => ${client}\n`,
    );
    fs.copyFileSync(path.join(client, "go.sum"), path.join(mod, "go.sum"));
    for (const b of blocks) {
      fs.mkdirSync(path.join(mod, blockName(b)));
      fs.writeFileSync(path.join(mod, blockName(b), "main.go"), this.source(b));
    }
    const env = { ...process.env, GOWORK: "off", GOFLAGS: "-mod=mod" };
    const tidy = await run("go", ["mod", "tidy"], { cwd: mod, env, timeoutMs: 600_000 });
    if (tidy.code !== 0) {
      for (const b of blocks) this.compileErrors.set(b, `go mod tidy:\n${tidy.output}`);
      return;
    }
    for (const b of blocks) {
      const r = await run("go", ["build", "-o", path.join(mod, "bin", blockName(b)), `./${blockName(b)}`], { cwd: mod, env, timeoutMs: 600_000 });
      if (r.code !== 0) this.compileErrors.set(b, r.output);
      else {
        const vet = await run("go", ["vet", `./${blockName(b)}`], { cwd: mod, env, timeoutMs: 600_000 });
        if (vet.code !== 0) this.compileErrors.set(b, `go vet:\n${vet.output}`);
      }
    }
  }

  private async compilePython(blocks: CodeBlock[]): Promise<void> {
    if (blocks.length === 0) return;
    const dir = path.join(this.dir, "py");
    fs.mkdirSync(dir);
    for (const b of blocks) {
      const file = path.join(dir, `${blockName(b)}.py`);
      fs.writeFileSync(file, this.source(b));
      const r = await run(this.pythonBin, ["-m", "py_compile", file], { cwd: dir, env: this.env });
      if (r.code !== 0) this.compileErrors.set(b, r.output);
    }
  }
}
