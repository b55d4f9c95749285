import { spawn, execFile, type ChildProcessWithoutNullStreams } from "node:child_process";
import * as crypto from "node:crypto";
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
export type MongoBackend = "external" | "mongodb-memory-server" | "ferretdb-sqlite" | "ferretdb-pg";

/**
 * KEYCAP_EMBEDDED_MONGO: which embedded server to start when MONGODB_URI is unset.
 * `auto` (default): a mongod when one can be had, else FerretDB on SQLite;
 * `ferretdb-sqlite`; `ferretdb-pg`: FerretDB on Debian's PostgreSQL (installed by
 * apt-get on first use when missing), which takes concurrent writers.
 */
export type EmbeddedChoice = "auto" | "ferretdb-sqlite" | "ferretdb-pg";
const EMBEDDED_CHOICES: readonly EmbeddedChoice[] = ["auto", "ferretdb-sqlite", "ferretdb-pg"];

export function embeddedChoice(env: NodeJS.ProcessEnv = process.env): EmbeddedChoice {
  const raw = env["KEYCAP_EMBEDDED_MONGO"]?.trim() || "auto";
  const found = EMBEDDED_CHOICES.find((c) => c === raw);
  if (!found) throw new Error(`KEYCAP_EMBEDDED_MONGO=${raw} is not one of ${EMBEDDED_CHOICES.join(", ")}`);
  return found;
}

/** A running MongoDB-protocol server (or an external one) and how to stop it. */
export interface MongoServerHandle {
  uri: string;
  backend: MongoBackend;
  /** Why this backend was chosen, for the log. */
  reason: string;
  /** The server process we started (FerretDB's wrapper; PostgreSQL runs as its child). */
  pid?: number;
  /** Settles when that process has exited (for a test that kills it). */
  exited?: Promise<unknown>;
  /** Stops the server (no-op for an external one) and removes temporary data. */
  stop(): Promise<void>;
}

export interface StartMongoOptions {
  logger: Logger;
  /** Keep data here across restarts (make run); omitted: a temporary folder removed at stop. */
  dataDir?: string;
  /** Overrides MONGODB_URI from the environment. */
  uri?: string;
  /** Overrides KEYCAP_EMBEDDED_MONGO from the environment. */
  embedded?: EmbeddedChoice;
  /** FerretDB's listen address (default a free loopback port); a fixed one lets a test restart it under the same URI. */
  listen?: string;
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

/**
 * Path of the FerretDB wrapper binary (tools/ferretdb) in the cache; the name
 * carries a digest of the wrapper's sources, so a changed wrapper is rebuilt.
 */
export function ferretdbBinaryPath(): string {
  const explicit = process.env["KEYCAP_FERRETDB_BIN"];
  if (explicit) return explicit;
  const source = path.join(projectRoot(), "tools", "ferretdb");
  const digest = crypto.createHash("sha256");
  for (const file of fs
    .readdirSync(source)
    .filter((f) => /\.go$|^go\.(mod|sum)$/.test(f))
    .sort()) {
    digest.update(file).update(fs.readFileSync(path.join(source, file)));
  }
  return path.join(keycapCacheDir(), `keycap-ferretdb-${FERRETDB_VERSION}-${digest.digest("hex").slice(0, 12)}`);
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
  const choice = opts.embedded ?? embeddedChoice();
  if (choice === "ferretdb-pg") {
    const [binary, pgBin] = await Promise.all([ensureFerretdb(opts.logger), ensurePostgres(opts.logger)]);
    return startFerretdb(binary, `KEYCAP_EMBEDDED_MONGO=ferretdb-pg (PostgreSQL from ${pgBin})`, opts, pgBin);
  }
  if (choice === "ferretdb-sqlite") {
    const binary = await ensureFerretdb(opts.logger);
    return startFerretdb(binary, "KEYCAP_EMBEDDED_MONGO=ferretdb-sqlite", opts);
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

/**
 * Builds and installs what `startMongoServer` will need, before anything timed runs (make
 * test and make run call it as a step of their own, with progress): FerretDB from the Go
 * module proxy unless a mongod can be had, and PostgreSQL for `ferretdb-pg`. Nothing is
 * started. @returns what was prepared, for the make step's one line.
 */
export async function prepareEmbeddedMongo(logger: Logger, choice: EmbeddedChoice = embeddedChoice()): Promise<string> {
  if (process.env["MONGODB_URI"]) return "MONGODB_URI is set: nothing to prepare";
  if (choice === "ferretdb-pg") {
    const [binary, pgBin] = await Promise.all([ensureFerretdb(logger), ensurePostgres(logger)]);
    return `FerretDB ${binary}, PostgreSQL ${pgBin}`;
  }
  if (choice === "auto") {
    const mongod = await findMongod();
    if (mongod.available) return `mongod: ${mongod.reason}`;
  }
  return `FerretDB ${await ensureFerretdb(logger)}`;
}

const PG_LIB = "/usr/lib/postgresql";

/** The bin directory of the newest installed PostgreSQL (Debian layout), or KEYCAP_PG_BIN. */
function findPostgres(): string | undefined {
  const explicit = process.env["KEYCAP_PG_BIN"];
  if (explicit) return explicit;
  if (!fs.existsSync(PG_LIB)) return undefined;
  const versions = fs
    .readdirSync(PG_LIB)
    .filter((v) => fs.existsSync(path.join(PG_LIB, v, "bin", "initdb")))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] === undefined ? undefined : path.join(PG_LIB, versions[0], "bin");
}

let postgresInstall: Promise<string> | undefined;

/**
 * PostgreSQL's bin directory; when none is installed, installs Debian's
 * `postgresql` package (as root, the way the project's setup installs what a
 * chosen backend needs), saying so first.
 */
export function ensurePostgres(logger: Logger): Promise<string> {
  postgresInstall ??= (async () => {
    const found = findPostgres();
    if (found) return found;
    if (process.getuid?.() !== 0) {
      throw new Error(
        "KEYCAP_EMBEDDED_MONGO=ferretdb-pg needs PostgreSQL: run `apt-get install postgresql` as root, or set KEYCAP_PG_BIN to its bin directory",
      );
    }
    logger.info(
      {},
      "installing PostgreSQL from Debian's packages for the ferretdb-pg backend (first run only, about a minute): apt-get update && apt-get install postgresql",
    );
    const run = promisify(execFile);
    const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
    try {
      await run("apt-get", ["update", "-q"], { env, maxBuffer: 64 * 1024 * 1024 });
      await run("apt-get", ["install", "-y", "-q", "--no-install-recommends", "postgresql"], { env, maxBuffer: 64 * 1024 * 1024 });
    } catch (err) {
      throw new Error(`cannot install PostgreSQL with apt-get (are Debian's package mirrors reachable?): ${errorText(err)}`);
    }
    const installed = findPostgres();
    if (!installed) throw new Error(`apt-get installed postgresql, but no ${PG_LIB}/*/bin/initdb was found`);
    return installed;
  })();
  postgresInstall.catch(() => (postgresInstall = undefined));
  return postgresInstall;
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
  const port = opts.listen === undefined ? undefined : Number(/:(\d+)$/.exec(opts.listen)?.[1]);
  const server = await MongoMemoryServer.create({
    ...(binary ? { binary: { systemBinary: binary } } : {}),
    instance: {
      ip: "127.0.0.1",
      ...(port ? { port } : {}),
      ...(opts.dataDir ? { dbPath: opts.dataDir, storageEngine: "wiredTiger" as const } : {}),
    },
  });
  const pid = server.instanceInfo?.instance.mongodProcess?.pid;
  return {
    uri: server.getUri(),
    backend: "mongodb-memory-server",
    reason,
    ...(pid === undefined ? {} : { pid }),
    stop: async () => {
      await server.stop({ doCleanup: !opts.dataDir });
    },
  };
}

/** Measured on this project's 2-core machines: a cold `go build` of the wrapper takes ~175 s. */
const FERRETDB_BUILD_ESTIMATE = "typically about 3 minutes on 2 cores, less with more";
const BUILD_PROGRESS_EVERY_MS = 15_000;

/**
 * Builds the FerretDB wrapper (tools/ferretdb) into the cache unless it is there, saying
 * so every 15 s (`progressEveryMs`) while it builds: minutes of silence look like a hang.
 */
export async function ensureFerretdb(logger: Logger, opts: { progressEveryMs?: number } = {}): Promise<string> {
  const binary = ferretdbBinaryPath();
  if (fs.existsSync(binary)) return binary;
  const source = path.join(projectRoot(), "tools", "ferretdb");
  logger.info({ binary, source }, `building FerretDB ${FERRETDB_VERSION} with the Go toolchain (first run only; ${FERRETDB_BUILD_ESTIMATE})`);
  fs.mkdirSync(path.dirname(binary), { recursive: true });
  const tmp = `${binary}.tmp-${process.pid}`;
  const started = Date.now();
  const progress = setInterval(() => {
    const seconds = Math.round((Date.now() - started) / 1000);
    logger.info({ seconds }, `still building FerretDB (${seconds} s; ${FERRETDB_BUILD_ESTIMATE})`);
  }, opts.progressEveryMs ?? BUILD_PROGRESS_EVERY_MS);
  progress.unref();
  try {
    await promisify(execFile)("go", ["build", "-trimpath", "-o", tmp, "."], {
      cwd: source,
      env: { ...process.env, GOFLAGS: "-mod=readonly" },
      maxBuffer: 16 * 1024 * 1024,
    });
  } catch (err) {
    throw new Error(`cannot build FerretDB from ${source} (is Go installed and the Go module proxy reachable?): ${errorText(err)}`);
  } finally {
    clearInterval(progress);
  }
  logger.info({ binary, seconds: Math.round((Date.now() - started) / 1000) }, "FerretDB built");
  fs.renameSync(tmp, binary);
  return binary;
}

async function startFerretdb(binary: string, reason: string, opts: StartMongoOptions, pgBin?: string): Promise<MongoServerHandle> {
  const temporary = opts.dataDir === undefined;
  const dataDir = opts.dataDir ?? fs.mkdtempSync(path.join(os.tmpdir(), "keycap-ferretdb-"));
  fs.mkdirSync(dataDir, { recursive: true });
  // PostgreSQL runs as an unprivileged user when we are root: it must reach
  // its cluster folder (it owns the folder itself, not our data directory).
  // (The cluster folder inside is PostgreSQL's own, mode 0700.)
  if (pgBin) fs.chmodSync(dataDir, 0o755);
  const backendArgs = pgBin ? [`--pg-bin=${pgBin}`, `--pg-data=${path.join(dataDir, "postgresql")}`] : [`--sqlite-url=file:${dataDir}/`];
  // stdin stays a pipe: the wrapper exits when it closes, so FerretDB (and its
  // PostgreSQL) never outlive us, even when we are SIGKILLed.
  const child: ChildProcessWithoutNullStreams = spawn(binary, [...backendArgs, `--listen-addr=${opts.listen ?? "127.0.0.1:0"}`, "--log-level=error"], {
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const uri = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`FerretDB did not start within 60 s: ${stderr}`)), 60_000);
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
    backend: pgBin ? "ferretdb-pg" : "ferretdb-sqlite",
    reason,
    pid: child.pid,
    exited,
    stop: () => {
      stopped ??= (async () => {
        child.stdin.end();
        // PostgreSQL's clean shutdown (a checkpoint) can take a few seconds.
        const timeout = new Promise<"timeout">((r) => setTimeout(() => r("timeout"), pgBin ? 25_000 : 5000).unref());
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
  return err instanceof Error ? (err.message.split("\n")[0] ?? err.name) : String(err);
}
