import {
  MongoClient,
  MongoError,
  MongoNetworkError,
  MongoNotConnectedError,
  MongoServerClosedError,
  MongoServerError,
  MongoServerSelectionError,
  MongoTopologyClosedError,
  MongoWriteConcernError,
  MongoBulkWriteError,
  type Collection,
  type Db,
  type Document,
} from "mongodb";
import { ConfigError } from "./config";
import type { KeycapError } from "./errors";
import { Reasons, refuse } from "./refuse";

/** An open MongoDB connection for one service. */
export interface MongoConnection {
  client: MongoClient;
  db: Db;
  close(): Promise<void>;
}

export interface MongoConnectOptions {
  /** Called after every command the driver sends, with its name, whether it succeeded and its round trip (s). */
  onCommand?: ((command: string, ok: boolean, seconds: number) => void) | undefined;
}

/** Hides credentials in a URI for messages. */
export function redactUri(uri: string): string {
  return uri.replace(/\/\/[^@/]*@/, "//***@");
}

/**
 * Connects and pings within timeoutMs; an unreachable server is a ConfigError
 * naming MONGODB_URI, so a bad URI stops the start with one clear line.
 * Writes default to write concern majority (FerretDB accepts and ignores it).
 */
export async function connectMongo(uri: string, database: string, timeoutMs: number, opts: MongoConnectOptions = {}): Promise<MongoConnection> {
  const { onCommand } = opts;
  const client = new MongoClient(uri, {
    serverSelectionTimeoutMS: timeoutMs,
    connectTimeoutMS: timeoutMs,
    writeConcern: { w: "majority" },
    appName: "keycap",
    // Command events cost the driver an event object per command: only when someone listens.
    monitorCommands: onCommand !== undefined,
  });
  if (onCommand) {
    client.on("commandSucceeded", (e) => onCommand(e.commandName, true, e.duration / 1000));
    client.on("commandFailed", (e) => onCommand(e.commandName, false, e.duration / 1000));
  }
  try {
    await client.connect();
    await client.db(database).command({ ping: 1 });
  } catch (err) {
    await client.close(true).catch(() => undefined);
    const reason = err instanceof Error ? err.message.split("\n")[0] : String(err);
    throw new ConfigError("MONGODB_URI", `cannot reach ${redactUri(uri)} within ${timeoutMs} ms (${reason})`);
  }
  return { client, db: client.db(database), close: () => client.close() };
}

/**
 * MongoDB's duplicate-key error (11000): the unique index refused a second
 * document. Callers treat it as "already done", never as a crash.
 */
/**
 * True when the server stopped a query at its `maxTimeMS` (MaxTimeMSExpired, 50), which only
 * operator reads set (KEYCAP_OPERATOR_QUERY_TIMEOUT_MS).
 */
export function isQueryTimeLimit(err: unknown): boolean {
  return err instanceof MongoServerError && (err.code === 50 || err.codeName === "MaxTimeMSExpired");
}

/** The refusal of an operator read that ran past KEYCAP_OPERATOR_QUERY_TIMEOUT_MS, on the database or across a page's reads. */
export function queryTimeLimitRefusal(): KeycapError {
  return refuse(
    Reasons.OPERATOR_QUERY_TIMEOUT,
    "the query ran past its time limit on the database (KEYCAP_OPERATOR_QUERY_TIMEOUT_MS) and was stopped; narrow it (a tool, a reason, a time range) or raise the limit",
  );
}

export function isDuplicateKey(err: unknown): boolean {
  return err instanceof MongoServerError ? err.code === 11000 : (err as { code?: unknown } | null)?.code === 11000;
}

/**
 * Whether a MongoDB failure is the database being unreachable or not answering in time
 * (network, server selection, a closed pool or topology, a write-concern timeout, or any
 * error the driver labels retryable), as opposed to a bug or a refused operation. Every
 * keycap write is keyed by `_id`, so retrying after one of these is safe: the caller is
 * told UNAVAILABLE, with the cause, never INTERNAL.
 */
export function isDatabaseUnavailable(err: unknown): boolean {
  if (
    err instanceof MongoNetworkError ||
    err instanceof MongoServerSelectionError ||
    err instanceof MongoNotConnectedError ||
    err instanceof MongoTopologyClosedError ||
    err instanceof MongoServerClosedError
  ) {
    return true;
  }
  if (err instanceof MongoWriteConcernError) return true;
  // An unordered insert wraps a failure to reach the database, with no write error of its own,
  // in a bulk write error: its cause says whether the database was unreachable.
  if (err instanceof MongoBulkWriteError && [err.writeErrors].flat().length === 0 && err.errorResponse instanceof Error) {
    return isDatabaseUnavailable(err.errorResponse);
  }
  if (err instanceof MongoError) {
    if (err.hasErrorLabel("RetryableWriteError") || err.hasErrorLabel("ResetPool") || err.hasErrorLabel("PoolRequestedRetry")) return true;
    // Pool cleared after a network error (not exported as a class in driver 7).
    if (err.name === "MongoPoolClearedError" || err.name === "MongoWaitQueueTimeoutError") return true;
  }
  // Node's socket errors reach us unwrapped when the driver writes to a socket the server
  // has just closed ("This socket has been ended by the other party", EPIPE).
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" && SOCKET_FAILURES.has(code);
}

const SOCKET_FAILURES = new Set([
  "EPIPE",
  "ECONNRESET",
  "ECONNREFUSED",
  "ECONNABORTED",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ERR_SOCKET_CLOSED",
  "ERR_STREAM_DESTROYED",
]);

/**
 * Whether the server is FerretDB (its buildInfo names its version), which pushes down
 * top-level equality only: an index for a range or a sort costs it every insert and serves
 * no read (bench/README, "What limits the two-write call").
 */
export async function isFerretDB(db: Db): Promise<boolean> {
  const info = await db.admin().command({ buildInfo: 1 });
  return "ferretdbVersion" in info;
}

/** A collection's indexes; none for a collection not created yet (NamespaceNotFound). */
export async function indexesOf<T extends Document>(coll: Collection<T>): Promise<Document[]> {
  return coll
    .listIndexes()
    .toArray()
    .catch((err: unknown) => {
      if ((err as { code?: unknown }).code === 26) return [];
      throw err;
    });
}
