/**
 * One embedded MongoDB per data directory, shared by every keycap process that uses it
 * (`keycap serve kernel` and `keycap serve ledger` started apart), instead of one empty
 * database each. ADR 0011 has the lifetime rules; in short:
 *
 * - `<mongo dir>/server.json` records the running server (URI, its pid, who started it),
 *   written under `<mongo dir>/server.lock` (created exclusively, holding the writer's pid;
 *   a lock whose pid is gone is stale and removed).
 * - The first process starts the server as its own child; later ones reuse it while its
 *   pid is alive and its address answers.
 * - Every process that uses it keeps it alive: when the recorded server has exited (its
 *   owner stopped or died, and the server with it), the first to notice starts it again
 *   on the same address and data files, so the others' connections find it again.
 */
import * as fs from "node:fs";
import * as net from "node:net";
import * as path from "node:path";
import type { MongoServerHandle } from "./embedded-mongo";
import type { Logger } from "./logger";

/** What server.json holds. */
export interface SharedServerRecord {
  uri: string;
  backend: MongoServerHandle["backend"];
  reason: string;
  /** The server process (FerretDB's wrapper, or mongod). */
  pid: number;
  /** The keycap process that started it, whose child it is. */
  ownerPid: number;
  startedAt: string;
}

export interface SharedMongoOptions {
  logger: Logger;
  /** The embedded server's data folder; server.json and server.lock live in it. */
  dir: string;
  /** Starts a server on `listen` (host:port), or on a free port when undefined. */
  start(listen: string | undefined): Promise<MongoServerHandle>;
  /** How often a process checks that the shared server still runs (ms). Default 500. */
  watchIntervalMs?: number;
}

const RECORD_FILE = "server.json";
const LOCK_FILE = "server.lock";
const LOCK_POLL_MS = 200;
const LOCK_WAIT_LOG_MS = 10_000;

/**
 * The data directory's embedded server: reused when one runs, else started and recorded.
 * The handle's `stop` stops the server only if this process started it; the others then
 * start it again (see the module comment).
 */
export async function startSharedMongoServer(opts: SharedMongoOptions): Promise<MongoServerHandle> {
  fs.mkdirSync(opts.dir, { recursive: true });
  const recordPath = path.join(opts.dir, RECORD_FILE);
  let owned: MongoServerHandle | undefined;
  let stopped = false;

  /** Under the lock: the live recorded server, or a new one on the recorded address (a first start may move off a taken one). */
  const ensure = async (mayMove: boolean): Promise<{ record: SharedServerRecord; started: boolean }> =>
    withLock(opts.dir, opts.logger, async () => {
      const record = readRecord(recordPath);
      if (record && isAlive(record.pid) && (await answers(record.uri))) return { record, started: false };
      const previous = record ? listenOf(record.uri) : undefined;
      let handle: MongoServerHandle;
      try {
        handle = await opts.start(previous);
      } catch (err) {
        // The old address may be taken by now; only a first start may move (nobody is
        // connected to it yet); a restart must keep the address the others dial.
        if (previous === undefined || !mayMove || !isAddressInUse(err)) throw err;
        handle = await opts.start(undefined);
      }
      if (handle.pid === undefined) throw new Error(`the ${handle.backend} server reported no pid; it cannot be shared`);
      const fresh: SharedServerRecord = {
        uri: handle.uri,
        backend: handle.backend,
        reason: handle.reason,
        pid: handle.pid,
        ownerPid: process.pid,
        startedAt: new Date().toISOString(),
      };
      writeRecord(recordPath, fresh);
      owned = handle;
      return { record: fresh, started: true };
    });

  const first = await ensure(true);
  if (!first.started) {
    opts.logger.info(
      { uri: first.record.uri, pid: first.record.pid, ownerPid: first.record.ownerPid, record: recordPath },
      `using the embedded MongoDB that process ${first.record.ownerPid} started in this data directory`,
    );
  }
  const uri = first.record.uri;

  // Keep it alive: whoever notices the server gone starts it again, on the same address.
  const timer = keepAlive(
    recordPath,
    uri,
    () => ensure(false),
    () => stopped,
    opts,
  );
  return {
    uri,
    backend: first.record.backend,
    reason: first.started ? first.record.reason : `shared with process ${first.record.ownerPid} (${path.join(opts.dir, RECORD_FILE)})`,
    pid: first.record.pid,
    ...(owned?.exited ? { exited: owned.exited } : {}),
    stop: async () => {
      stopped = true;
      clearInterval(timer);
      // Only our own child: the others start it again if they still need it.
      await owned?.stop();
    },
  };
}

/** Every watch interval: when the recorded server has exited, `ensure` starts it again (under the lock). */
function keepAlive(
  recordPath: string,
  uri: string,
  ensure: () => Promise<{ record: SharedServerRecord; started: boolean }>,
  stopped: () => boolean,
  opts: SharedMongoOptions,
): NodeJS.Timeout {
  let checking = false;
  const timer = setInterval(() => {
    if (checking || stopped()) return;
    const record = readRecord(recordPath);
    if (record && isAlive(record.pid)) return;
    checking = true;
    ensure().then(
      (r) => {
        checking = false;
        if (r.started && !stopped()) {
          opts.logger.warn(
            { uri: r.record.uri, pid: r.record.pid, previousOwner: record?.ownerPid },
            "the shared embedded MongoDB had exited; started it again",
          );
        }
        if (r.record.uri !== uri) {
          opts.logger.error({ uri: r.record.uri, was: uri }, "the shared embedded MongoDB came back on another address; restart this process to reach it");
        }
      },
      (err: unknown) => {
        checking = false;
        opts.logger.error({ err: String(err) }, "the shared embedded MongoDB has exited and could not be started again; retrying");
      },
    );
  }, opts.watchIntervalMs ?? 500);
  return timer.unref();
}

/** Runs `fn` holding `<dir>/server.lock`; waits (saying so) while a live process holds it. */
async function withLock<T>(dir: string, logger: Logger, fn: () => Promise<T>): Promise<T> {
  const lockPath = path.join(dir, LOCK_FILE);
  let waitingSince: number | undefined;
  let lastLog = 0;
  for (;;) {
    try {
      const fd = fs.openSync(lockPath, "wx", 0o600);
      fs.writeSync(fd, String(process.pid));
      fs.closeSync(fd);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    const holder = Number(readText(lockPath));
    // An unreadable or half-written lock is given one poll to be completed.
    if (Number.isInteger(holder) && holder > 0 && !isAlive(holder)) {
      fs.rmSync(lockPath, { force: true });
      continue;
    }
    waitingSince ??= Date.now();
    if (Date.now() - lastLog >= LOCK_WAIT_LOG_MS) {
      lastLog = Date.now();
      logger.info({ holder, lock: lockPath }, `waiting for process ${holder}, which is starting the embedded MongoDB of this data directory`);
    }
    await new Promise((r) => setTimeout(r, LOCK_POLL_MS));
  }
  try {
    return await fn();
  } finally {
    fs.rmSync(lockPath, { force: true });
  }
}

function readRecord(file: string): SharedServerRecord | undefined {
  const text = readText(file);
  if (text === undefined) return undefined;
  try {
    const r = JSON.parse(text) as Partial<SharedServerRecord>;
    if (typeof r.uri === "string" && typeof r.pid === "number" && typeof r.ownerPid === "number" && typeof r.backend === "string") {
      return r as SharedServerRecord;
    }
  } catch {
    // a torn or foreign file: start afresh
  }
  return undefined;
}

function writeRecord(file: string, record: SharedServerRecord): void {
  // Write then rename: a reader never sees half a record.
  const tmp = `${file}.tmp-${process.pid}`;
  fs.writeFileSync(tmp, JSON.stringify(record, null, 2) + "\n", { mode: 0o600 });
  fs.renameSync(tmp, file);
}

function readText(file: string): string | undefined {
  try {
    return fs.readFileSync(file, "utf8");
  } catch {
    return undefined;
  }
}

/** Whether a process with this pid exists (EPERM: it does, someone else's). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** host:port of a mongodb:// URI with one host. */
function listenOf(uri: string): string | undefined {
  const m = /^mongodb:\/\/(?:[^@/]*@)?([^/,?]+)/.exec(uri);
  return m?.[1];
}

function answers(uri: string, timeoutMs = 1000): Promise<boolean> {
  const hostPort = listenOf(uri);
  const m = hostPort ? /^(.*):(\d+)$/.exec(hostPort) : null;
  if (!m) return Promise.resolve(false);
  return new Promise((resolve) => {
    const socket = net.connect({ host: m[1]!.replace(/^\[|\]$/g, ""), port: Number(m[2]) });
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once("connect", () => done(true));
    socket.once("error", () => done(false));
  });
}

function isAddressInUse(err: unknown): boolean {
  return /address already in use|EADDRINUSE/i.test(err instanceof Error ? err.message : String(err));
}
