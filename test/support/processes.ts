import { spawn, type ChildProcess } from "node:child_process";
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as readline from "node:readline";
import { freshDatabaseName, testMongoUri } from "./mongo";

export const CLI_ENTRY = path.resolve(process.cwd(), "dist/services/cli/src/main.js");

export interface Endpoints {
  kernel?: string;
  ledger?: string;
  admin?: string;
  console?: string;
  gateway?: string;
  /** The Prometheus endpoint (host:port), when KEYCAP_METRICS_LISTEN is set. */
  metrics?: string;
}

/** A keycap service running as a real child process. */
export interface ServiceProcess {
  child: ChildProcess;
  endpoints: Endpoints;
  env: Record<string, string>;
  /** Everything it printed so far (stdout JSON logs and stderr). */
  output(): string;
  /** Sends a signal and resolves with the exit code (null if killed by signal). */
  stop(signal?: NodeJS.Signals, timeoutMs?: number): Promise<number | null>;
}

export interface StartOptions {
  /** Extra environment (overrides the defaults below). */
  env?: Record<string, string>;
  /** Shared data dir (signing keys, admin token); a fresh temp dir by default. */
  dataDir?: string;
  /** Milliseconds to wait for the "ready" log line. */
  readyTimeoutMs?: number;
}

/**
 * The runtime principal's secret every test's services bootstrap as "local-runtime"
 * (KEYCAP_RUNTIME_TOKEN), and that the TypeScript client in the test process finds by its
 * default lookup (the root hooks put it in process.env).
 */
export const TEST_RUNTIME_TOKEN = process.env["KEYCAP_RUNTIME_TOKEN"] ?? `keycap_rt_test_${crypto.randomBytes(18).toString("base64url")}`;

/** A fresh environment for one test's services: own database, own data dir, free ports. */
export function serviceEnv(overrides: Record<string, string> = {}): Record<string, string> {
  return {
    MONGODB_URI: testMongoUri(),
    KEYCAP_MONGODB_DATABASE: freshDatabaseName(),
    KEYCAP_DATA_DIR: fs.mkdtempSync(path.join(os.tmpdir(), "keycap-test-")),
    KEYCAP_KERNEL_LISTEN: "127.0.0.1:0",
    KEYCAP_LEDGER_LISTEN: "127.0.0.1:0",
    KEYCAP_ADMIN_LISTEN: "127.0.0.1:0",
    KEYCAP_LOG_LEVEL: "info",
    KEYCAP_SHUTDOWN_GRACE_MS: "5000",
    KEYCAP_RUNTIME_TOKEN: TEST_RUNTIME_TOKEN,
    ...overrides,
  };
}

/**
 * Starts `keycap serve <which>` as a child process and waits for its "ready"
 * log line, which names the real bound ports.
 */
export async function startService(
  which: "all" | "kernel" | "ledger" | "gateway",
  env: Record<string, string>,
  opts: StartOptions = {},
): Promise<ServiceProcess> {
  const child = spawn(process.execPath, [CLI_ENTRY, "serve", which], {
    env: { PATH: process.env["PATH"] ?? "", HOME: process.env["HOME"] ?? "", ...env, ...opts.env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stderr?.on("data", (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const endpoints = await new Promise<Endpoints>((resolve, reject) => {
    const timer = setTimeout(() => {
      // Never leave a half-started service behind.
      child.kill("SIGKILL");
      reject(new Error(`${which} not ready within ${opts.readyTimeoutMs ?? 30000} ms:\n${out}`));
    }, opts.readyTimeoutMs ?? 30000);
    const lines = readline.createInterface({ input: child.stdout! });
    lines.on("line", (line) => {
      out += line + "\n";
      try {
        const rec = JSON.parse(line) as { msg?: string; endpoints?: { listener: string; address: string }[] };
        if (rec.msg === "ready" && rec.endpoints) {
          clearTimeout(timer);
          const e: Endpoints = {};
          for (const { listener, address } of rec.endpoints) e[listener as keyof Endpoints] = address;
          resolve(e);
        }
      } catch {
        // not a log line
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${which} exited with ${code} before ready:\n${out}`));
    });
  });
  return {
    child,
    endpoints,
    env,
    output: () => out,
    stop: async (signal = "SIGTERM", timeoutMs = 15000) => {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill(signal);
      const timeout = new Promise<"timeout">((r) => setTimeout(() => r("timeout"), timeoutMs).unref());
      const result = await Promise.race([exited, timeout]);
      if (result === "timeout") {
        child.kill("SIGKILL");
        throw new Error(`${which} did not exit within ${timeoutMs} ms after ${signal}`);
      }
      return result;
    },
  };
}

/** Runs the CLI to completion (for config-failure and operator-command tests). */
export function runCli(
  args: string[],
  env: Record<string, string>,
  timeoutMs = 30000,
  opts: { cwd?: string } = {},
): Promise<{ code: number | null; stdout: string; stderr: string; ms: number }> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI_ENTRY, ...args], {
      env: { PATH: process.env["PATH"] ?? "", HOME: process.env["HOME"] ?? "", ...env },
      stdio: ["ignore", "pipe", "pipe"],
      ...(opts.cwd !== undefined ? { cwd: opts.cwd } : {}),
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`keycap ${args.join(" ")} did not finish within ${timeoutMs} ms\n${stdout}\n${stderr}`));
    }, timeoutMs);
    child.once("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, ms: Date.now() - started });
    });
  });
}

/**
 * Runs the CLI with stdout and stderr on a real terminal (a pty from util-linux's
 * `script`), for what depends on a TTY (colour, width). Output is the terminal's, CRLF and
 * all. `columns`: the terminal's width (`stty cols`); unset, the pty reports none (0 columns).
 */
export function runCliInTerminal(
  args: string[],
  env: Record<string, string>,
  timeoutMs = 30000,
  opts: { columns?: number } = {},
): Promise<{ code: number | null; output: string }> {
  const quote = (a: string): string => `'${a.replace(/'/g, "'\\''")}'`;
  const cli = [process.execPath, CLI_ENTRY, ...args].map(quote).join(" ");
  const command = opts.columns !== undefined ? `stty cols ${opts.columns} rows 50; exec ${cli}` : cli;
  return new Promise((resolve, reject) => {
    const child = spawn("script", ["-qfec", command, "/dev/null"], {
      env: { PATH: process.env["PATH"] ?? "", HOME: process.env["HOME"] ?? "", TERM: "xterm-256color", ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    child.stdout.on("data", (d: Buffer) => (output += d.toString()));
    child.stderr.on("data", (d: Buffer) => (output += d.toString()));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`keycap ${args.join(" ")} (in a terminal) did not finish within ${timeoutMs} ms\n${output}`));
    }, timeoutMs);
    child.once("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}
