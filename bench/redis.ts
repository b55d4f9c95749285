/**
 * Redis for the peer scenario (bench/peer-server.ts): Debian's `redis-server`, installed
 * with apt-get on first use when it is missing (as root, the way the harness installs
 * PostgreSQL for the ferretdb-pg backend), started on a free loopback port in a temporary
 * folder with persistence off, and stopped (folder removed) at the end.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import * as readline from "node:readline";
import { promisify } from "node:util";

/** A running redis-server we started. */
export interface RedisHandle {
  url: string;
  port: number;
  pid: number;
  /** redis-server's version line (`redis-server --version`). */
  version: string;
  stop(): Promise<void>;
}

/** The first executable `redis-server` on PATH (or KEYCAP_REDIS_SERVER), else undefined. */
export function findRedisServer(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const explicit = env["KEYCAP_REDIS_SERVER"];
  if (explicit) return fs.existsSync(explicit) ? explicit : undefined;
  const dirs = [...(env["PATH"] ?? "").split(path.delimiter), "/usr/bin", "/usr/sbin"];
  for (const dir of dirs) {
    if (!dir) continue;
    const candidate = path.join(dir, "redis-server");
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

let install: Promise<string> | undefined;

/**
 * The redis-server binary; when none is installed, installs Debian's `redis-server`
 * package (root only), saying so first.
 */
export function ensureRedisServer(log: (m: string) => void): Promise<string> {
  install ??= (async () => {
    const found = findRedisServer();
    if (found) return found;
    if (process.getuid?.() !== 0) {
      throw new Error("the peer-powertools scenario needs Redis: run `apt-get install redis-server` as root, or set KEYCAP_REDIS_SERVER to its path");
    }
    log("installing Redis from Debian's packages for the peer scenario (first run only): apt-get update && apt-get install redis-server");
    const run = promisify(execFile);
    // No daemon started by the package's maintainer scripts: the bench starts its own.
    const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive", RUNLEVEL: "1" };
    try {
      await run("apt-get", ["update", "-q"], { env, maxBuffer: 64 * 1024 * 1024 });
      await run("apt-get", ["install", "-y", "-q", "--no-install-recommends", "redis-server"], { env, maxBuffer: 64 * 1024 * 1024 });
    } catch (err) {
      throw new Error(
        `cannot install redis-server with apt-get (are Debian's package mirrors reachable?): ${err instanceof Error ? err.message : String(err)}`,
      );
    }
    const installed = findRedisServer();
    if (!installed) throw new Error("apt-get installed redis-server, but no redis-server binary was found");
    return installed;
  })();
  install.catch(() => (install = undefined));
  return install;
}

/** A loopback port that was free a moment ago. */
export function freeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

/** Sends PING over RESP and resolves on +PONG (no client library: this checks the server, not a client). */
export function pingRedis(port: number, timeoutMs = 2000): Promise<void> {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, "127.0.0.1");
    let got = "";
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error(`redis on 127.0.0.1:${port}: no PONG within ${timeoutMs} ms`));
    }, timeoutMs);
    sock.once("error", (err) => {
      clearTimeout(timer);
      reject(err);
    });
    sock.once("connect", () => sock.write("*1\r\n$4\r\nPING\r\n"));
    sock.on("data", (d) => {
      got += d.toString("latin1");
      if (got.includes("\r\n")) {
        clearTimeout(timer);
        sock.destroy();
        if (got.startsWith("+PONG")) resolve();
        else reject(new Error(`redis on 127.0.0.1:${port} answered ${JSON.stringify(got.trim())}`));
      }
    });
  });
}

export interface StartRedisOptions {
  /** The binary (default: ensureRedisServer). */
  binary?: string;
  log?: (m: string) => void;
  readyTimeoutMs?: number;
}

/** Starts redis-server on a free loopback port in a temporary folder; stops it on failure. */
export async function startRedis(opts: StartRedisOptions = {}): Promise<RedisHandle> {
  const log = opts.log ?? (() => undefined);
  const binary = opts.binary ?? (await ensureRedisServer(log));
  const version = (await promisify(execFile)(binary, ["--version"], { encoding: "utf8" })).stdout.trim();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-bench-redis-"));
  const readyTimeoutMs = opts.readyTimeoutMs ?? 15_000;
  // A port can be taken between probing and binding: try a few.
  let lastError: unknown;
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freeLoopbackPort();
    const child = spawn(
      binary,
      [
        "--port",
        String(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        dir,
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--protected-mode",
        "yes",
        "--logfile",
        "",
      ],
      { cwd: dir, stdio: ["ignore", "pipe", "pipe"] },
    );
    try {
      await waitReady(child, port, readyTimeoutMs);
    } catch (err) {
      lastError = err;
      await stopChild(child);
      continue;
    }
    const exitGuard = (): void => void child.kill("SIGKILL");
    process.once("exit", exitGuard);
    return {
      url: `redis://127.0.0.1:${port}`,
      port,
      pid: child.pid as number,
      version,
      stop: async () => {
        process.removeListener("exit", exitGuard);
        await stopChild(child);
        fs.rmSync(dir, { recursive: true, force: true });
      },
    };
  }
  fs.rmSync(dir, { recursive: true, force: true });
  throw lastError instanceof Error ? lastError : new Error(String(lastError));
}

function waitReady(child: ChildProcess, port: number, timeoutMs: number): Promise<void> {
  const tail: string[] = [];
  const keep = (line: string): void => {
    tail.push(line);
    if (tail.length > 20) tail.shift();
  };
  readline.createInterface({ input: child.stdout! }).on("line", keep);
  readline.createInterface({ input: child.stderr! }).on("line", keep);
  return new Promise<void>((resolve, reject) => {
    let done = false;
    const finish = (err?: Error): void => {
      if (done) return;
      done = true;
      clearInterval(poll);
      clearTimeout(timer);
      if (err) reject(err);
      else resolve();
    };
    const timer = setTimeout(() => finish(new Error(`redis-server not ready on port ${port} within ${timeoutMs} ms:\n${tail.join("\n")}`)), timeoutMs);
    const poll = setInterval(() => {
      pingRedis(port, 500).then(
        () => finish(),
        () => undefined,
      );
    }, 50);
    child.once("exit", (code, sig) => finish(new Error(`redis-server exited (${code ?? sig}) before ready:\n${tail.join("\n")}`)));
  });
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  child.kill("SIGTERM");
  const timeout = new Promise<"timeout">((r) => setTimeout(() => r("timeout"), 5000).unref());
  if ((await Promise.race([exited, timeout])) === "timeout") {
    child.kill("SIGKILL");
    await exited;
  }
}
