import { spawn, execFile, type ChildProcessWithoutNullStreams } from "node:child_process";
import * as dns from "node:dns/promises";
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import * as readline from "node:readline";
import { promisify } from "node:util";
import type { Logger } from "./logger";
import { projectRoot } from "./repo-paths";

/** Which MongoDB-protocol server is in use. */
export type MongoBackend = "external" | "mongodb-memory-server" | "ferretdb";

/** A running MongoDB-protocol server (or an external one) and how to stop it. */
export interface MongoServerHandle {
  uri: string;
  backend: MongoBackend;
  /** Why this backend was chosen, for the log. */
  reason: string;
  /** Stops the server (no-op for an external one) and removes temporary data. */
  stop(): Promise<void>;
}

export interface StartMongoOptions {
  logger: Logger;
  /** Keep data here across restarts (make run); omitted: a temporary folder removed at stop. */
  dataDir?: string;
  /** Overrides MONGODB_URI from the environment. */
  uri?: string;
}

export const FERRETDB_VERSION = "v1.24.2";
const DOWNLOAD_HOST = "fastdl.mongodb.org";
const DOWNLOAD_PROBE_MS = 2000;

/** Where built tools are cached between runs. */
export function keycapCacheDir(): string {
  const explicit = process.env["KEYCAP_CACHE_DIR"];
  if (explicit) return path.resolve(explicit);
  const xdg = process.env["XDG_CACHE_HOME"];
  return path.join(xdg ? xdg : path.join(os.homedir(), ".cache"), "keycap");
}

/** Path of the FerretDB wrapper binary (tools/ferretdb) in the cache. */
export function ferretdbBinaryPath(): string {
  return process.env["KEYCAP_FERRETDB_BIN"] ?? path.join(keycapCacheDir(), `keycap-ferretdb-${FERRETDB_VERSION}`);
}

/**
 * The embedded default MongoDB of DESIGN §6: MONGODB_URI when set; else
 * mongodb-memory-server when a mongod can be had (system binary, cached, or
 * downloadable, probed in at most ~2 s); else FerretDB v1.24.2 with its SQLite
 * backend, built once from the Go module proxy into the cache.
 */
export async function startMongoServer(opts: StartMongoOptions): Promise<MongoServerHandle> {
  const uri = opts.uri ?? process.env["MONGODB_URI"];
  if (uri) {
    return { uri, backend: "external", reason: "MONGODB_URI is set", stop: async () => undefined };
  }
  const mongod = await findMongod();
  if (mongod.available) {
    try {
      return await startMemoryServer(mongod.reason, mongod.binary, opts);
    } catch (err) {
      opts.logger.warn({ err: String(err) }, "mongodb-memory-server failed; falling back to FerretDB");
    }
  }
  const binary = await ensureFerretdb(opts.logger);
  return startFerretdb(binary, `no mongod could be had (${mongod.reason})`, opts);
}

interface MongodProbe {
  available: boolean;
  binary?: string;
  reason: string;
}

async function findMongod(): Promise<MongodProbe> {
  const system = process.env["MONGOMS_SYSTEM_BINARY"];
  if (system && fs.existsSync(system)) return { available: true, binary: system, reason: `MONGOMS_SYSTEM_BINARY=${system}` };
  for (const dir of (process.env["PATH"] ?? "").split(path.delimiter)) {
    const candidate = path.join(dir, "mongod");
    if (dir && fs.existsSync(candidate)) return { available: true, binary: candidate, reason: `mongod on PATH (${candidate})` };
  }
  for (const dir of [path.join(os.homedir(), ".cache", "mongodb-binaries"), path.join(projectRoot(), "node_modules", ".cache", "mongodb-memory-server")]) {
    const cached = fs.existsSync(dir) ? fs.readdirSync(dir).find((f) => f.startsWith("mongod")) : undefined;
    if (cached) return { available: true, binary: path.join(dir, cached), reason: `cached mongod ${path.join(dir, cached)}` };
  }
  try {
    await withTimeout(dns.lookup(DOWNLOAD_HOST), DOWNLOAD_PROBE_MS);
    await withTimeout(tcpProbe(DOWNLOAD_HOST, 443), DOWNLOAD_PROBE_MS);
    return { available: true, reason: `${DOWNLOAD_HOST} is reachable; mongodb-memory-server will download mongod` };
  } catch (err) {
    return { available: false, reason: `no system or cached mongod, and ${DOWNLOAD_HOST} unreachable: ${errorText(err)}` };
  }
}

async function startMemoryServer(reason: string, binary: string | undefined, opts: StartMongoOptions): Promise<MongoServerHandle> {
  // Loaded lazily: the package is only needed on machines that can run mongod.
  const { MongoMemoryServer } = await import("mongodb-memory-server");
  if (opts.dataDir) fs.mkdirSync(opts.dataDir, { recursive: true });
  const server = await MongoMemoryServer.create({
    ...(binary ? { binary: { systemBinary: binary } } : {}),
    instance: { ip: "127.0.0.1", ...(opts.dataDir ? { dbPath: opts.dataDir, storageEngine: "wiredTiger" as const } : {}) },
  });
  return {
    uri: server.getUri(),
    backend: "mongodb-memory-server",
    reason,
    stop: async () => {
      await server.stop({ doCleanup: !opts.dataDir });
    },
  };
}

/** Builds the FerretDB wrapper (tools/ferretdb) into the cache unless it is there. */
export async function ensureFerretdb(logger: Logger): Promise<string> {
  const binary = ferretdbBinaryPath();
  if (fs.existsSync(binary)) return binary;
  const source = path.join(projectRoot(), "tools", "ferretdb");
  logger.info({ binary, source }, `building FerretDB ${FERRETDB_VERSION} with the Go toolchain (first run only, about a minute)`);
  fs.mkdirSync(path.dirname(binary), { recursive: true });
  const tmp = `${binary}.tmp-${process.pid}`;
  try {
    await promisify(execFile)("go", ["build", "-trimpath", "-o", tmp, "."], {
      cwd: source,
      env: { ...process.env, GOFLAGS: "-mod=readonly" },
      maxBuffer: 16 * 1024 * 1024,
    });
  } catch (err) {
    throw new Error(`cannot build FerretDB from ${source} (is Go installed and the Go module proxy reachable?): ${errorText(err)}`);
  }
  fs.renameSync(tmp, binary);
  return binary;
}

async function startFerretdb(binary: string, reason: string, opts: StartMongoOptions): Promise<MongoServerHandle> {
  const temporary = opts.dataDir === undefined;
  const dataDir = opts.dataDir ?? fs.mkdtempSync(path.join(os.tmpdir(), "keycap-ferretdb-"));
  fs.mkdirSync(dataDir, { recursive: true });
  // stdin stays a pipe: the wrapper exits when it closes, so FerretDB never
  // outlives us, even when we are SIGKILLed.
  const child: ChildProcessWithoutNullStreams = spawn(
    binary,
    [`--sqlite-url=file:${dataDir}/`, "--listen-addr=127.0.0.1:0", "--log-level=error"],
    { stdio: ["pipe", "pipe", "pipe"] },
  );
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const uri = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`FerretDB did not start within 30 s: ${stderr}`)), 30_000);
    const lines = readline.createInterface({ input: child.stdout });
    lines.once("line", (line) => {
      clearTimeout(timer);
      try {
        const parsed = JSON.parse(line) as { uri?: unknown };
        if (typeof parsed.uri === "string") resolve(parsed.uri);
        else reject(new Error(`unexpected FerretDB output: ${line}`));
      } catch {
        reject(new Error(`unexpected FerretDB output: ${line}`));
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`FerretDB exited with code ${code}: ${stderr.trim()}`));
    });
  });
  let stopped: Promise<void> | undefined;
  return {
    uri,
    backend: "ferretdb",
    reason,
    stop: () => {
      stopped ??= (async () => {
        child.stdin.end();
        const timeout = new Promise<"timeout">((r) => setTimeout(() => r("timeout"), 5000).unref());
        if ((await Promise.race([exited, timeout])) === "timeout") {
          child.kill("SIGKILL");
          await exited;
        }
        if (temporary) fs.rmSync(dataDir, { recursive: true, force: true });
      })();
      return stopped;
    },
  };
}

function tcpProbe(host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port });
    socket.once("connect", () => {
      socket.destroy();
      resolve();
    });
    socket.once("error", (err) => {
      socket.destroy();
      reject(err);
    });
  });
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
    p.then(
      (v) => {
        clearTimeout(timer);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(timer);
        reject(e instanceof Error ? e : new Error(String(e)));
      },
    );
  });
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message.split("\n")[0] ?? err.name : String(err);
}
