import * as fs from "node:fs";
import * as path from "node:path";
import { ConfigError, formatHostPort, loadConfig, type KeycapConfig } from "./config";
import { startMongoServer, type MongoServerHandle } from "./embedded-mongo";
import { redactUri } from "./mongo";
import { startSharedMongoServer } from "./shared-mongo";
import { createLogger, type Logger } from "./logger";
import { routeGrpcLogs, type RunningListener } from "./grpc-server";
import { Metrics } from "./metrics";
import { startMetricsServer, type RunningMetricsServer } from "./metrics-server";
import { stopTracing } from "./tracing";

/** Signals this close after the first one are the same stop request delivered twice. */
const DUPLICATE_SIGNAL_MS = 1000;

/** A started service: its listeners and how to stop it. */
export interface RunningService {
  name: string;
  listeners: RunningListener[];
  /** Graceful: listeners drain for up to graceMs, then MongoDB is closed. */
  stop(graceMs: number): Promise<void>;
  /** Re-reads what can change without a restart (SIGHUP), e.g. the kernel's signing keys. */
  reload?(): Promise<void>;
}

/** What a service needs to start, beyond its configuration. */
export interface ServiceDeps {
  config: KeycapConfig;
  logger: Logger;
  mongoUri: string;
  /** The process's metrics (KEYCAP_METRICS_LISTEN); undefined when off, and nothing is recorded. */
  metrics?: Metrics | undefined;
}

export type ServiceStarter = (deps: ServiceDeps) => Promise<RunningService>;

/**
 * The process lifecycle shared by `keycap serve` and each service's main:
 * validate config (a bad value: one line naming the setting, exit 2), get a
 * MongoDB, start the services, print the endpoints, and on SIGTERM/SIGINT let
 * in-flight calls finish and exit 0 (a second signal exits at once).
 */
export async function runServices(label: string, starters: ServiceStarter[]): Promise<void> {
  let config: KeycapConfig;
  try {
    config = loadConfig();
    ensureDataDir(config.dataDir);
  } catch (err) {
    failStart(err);
  }
  const logger = createLogger(label, config.logLevel, config.logFormat);
  routeGrpcLogs(logger);
  let mongo: MongoServerHandle | undefined;
  let metricsServer: RunningMetricsServer | undefined;
  const metrics = config.metricsListen ? new Metrics({ toolLabels: config.metricsToolLabels }) : undefined;
  const running: RunningService[] = [];
  let stopping = false;

  let firstSignalAt = 0;
  const stopAll = async (signal: string): Promise<void> => {
    if (stopping) {
      // A signal sent to the process group (make run, a supervisor) arrives more than
      // once within moments: that is one request to stop, not an operator insisting.
      if (Date.now() - firstSignalAt < DUPLICATE_SIGNAL_MS) return;
      logger.warn({ signal }, "second signal; exiting now");
      process.exit(1);
    }
    stopping = true;
    firstSignalAt = Date.now();
    logger.info({ signal, graceMs: config.shutdownGraceMs }, "shutting down");
    await Promise.all(running.map((s) => s.stop(config.shutdownGraceMs)));
    await metricsServer?.close();
    await mongo?.stop();
    // Spans of the last calls are still batched: export them before exiting.
    await stopTracing();
    logger.info({}, "stopped");
    process.exit(0);
  };
  process.on("SIGTERM", () => void stopAll("SIGTERM"));
  process.on("SIGINT", () => void stopAll("SIGINT"));
  // SIGHUP: signing keys (kernel) and every listener's TLS certificate are read again.
  process.on("SIGHUP", () => {
    for (const s of running) {
      s.reload?.().catch((err: unknown) => logger.error({ service: s.name, err: String(err) }, "reload failed; still running with what was loaded before"));
    }
  });

  try {
    // First: a metrics address that cannot be bound stops the start before anything else.
    if (metrics && config.metricsListen) metricsServer = await startMetricsServer(config.metricsListen, metrics, logger, config.tls.metrics);
    mongo = await openMongo(config, logger);
    logger.info({ backend: mongo.backend, reason: mongo.reason, uri: redactUri(mongo.uri) }, `MongoDB backend: ${mongo.backend}`);
    for (const start of starters) {
      const service = await start({ config, logger, mongoUri: mongo.uri, metrics });
      running.push(service);
      wirePeers(config, service);
      if (stopping) return;
    }
  } catch (err) {
    await Promise.all(running.map((s) => s.stop(0)));
    await metricsServer?.close();
    await mongo?.stop();
    failStart(err);
  }
  const endpoints: Endpoint[] = running.flatMap((s) =>
    s.listeners.map((l) => ({ listener: l.name, address: formatHostPort(l.address), transport: l.transport })),
  );
  if (metricsServer) endpoints.push({ listener: "metrics", address: formatHostPort(metricsServer.address), transport: config.tls.metrics ? "https" : "http" });
  const mongoUri = redactUri(mongo.uri);
  // The banner first: the "ready" line is what scripts and tests wait for, and everything
  // printed for people must be out by then (stdout and stderr are separate pipes).
  process.stderr.write(banner(config, endpoints, mongo.backend, mongoUri, new Set(running.map((s) => s.name))));
  logger.info({ endpoints, mongoBackend: mongo.backend, mongoUri, dataDir: config.dataDir }, "ready");
}

/**
 * MONGODB_URI when set; else the data directory's embedded server, shared with any other
 * keycap process using the same data directory (`serve kernel` and `serve ledger` apart
 * see one database, ADR 0011).
 */
function openMongo(config: KeycapConfig, logger: Logger): Promise<MongoServerHandle> {
  if (config.mongodbUri !== undefined) return startMongoServer({ logger, uri: config.mongodbUri });
  const dir = path.join(config.dataDir, "mongo");
  return startSharedMongoServer({ logger, dir, start: (listen) => startMongoServer({ logger, uri: "", dataDir: dir, ...(listen ? { listen } : {}) }) });
}

interface Endpoint {
  listener: string;
  address: string;
  transport: string;
}

/** What a person starting keycap needs to read: where each listener is, where data and credentials are. */
function banner(config: KeycapConfig, endpoints: Endpoint[], backend: string, mongoUri: string, services: Set<string>): string {
  const lines = [`\nkeycap is running (MongoDB: ${backend})`];
  for (const e of endpoints) {
    lines.push(
      e.transport === "http" || e.transport === "https"
        ? `  ${e.listener.padEnd(7)} ${e.transport}://${e.address}/metrics`
        : `  ${e.listener.padEnd(7)} ${e.address} (${e.transport})`,
    );
  }
  lines.push(`  data    ${config.dataDir}`);
  lines.push(
    config.mongodbUri === undefined
      ? `  mongodb ${mongoUri} (embedded, shared by every keycap serve with this data directory)`
      : `  mongodb ${mongoUri} (MONGODB_URI)`,
  );
  for (const e of endpoints.filter((e) => e.listener === "console")) {
    lines.push(`  open the console at ${e.transport === "tls" ? "https" : "http"}://${e.address}/ (sign in with the admin credential)`);
  }
  if (services.has("ledger")) lines.push(`  admin credential: ${config.adminToken ? "KEYCAP_ADMIN_TOKEN" : config.adminTokenFile}`);
  if (services.has("kernel") && config.bootstrapRuntime) {
    lines.push(`  runtime credential (principal local-runtime): ${config.runtimeToken ? "KEYCAP_RUNTIME_TOKEN" : config.runtimeTokenFile}`);
  }
  if (services.has("kernel") && services.has("ledger")) {
    lines.push("  next: node dist/clients/ts/examples/charge.js A-17 (a first tool call), then npx keycap entries; docs/start.md");
  }
  lines.push("Press Ctrl-C to stop.\n\n");
  return lines.join("\n");
}

/**
 * When kernel and ledger run in one process and their peer addresses were not
 * set explicitly, each dials the other's real bound address (port 0 included).
 * Services read config.kernelAddress / ledgerAddress at call time for this.
 */
function wirePeers(config: KeycapConfig, service: RunningService): void {
  for (const l of service.listeners) {
    if (l.name === "kernel" && !config.peerAddressesSet.kernel) config.kernelAddress = dialable(l.address);
    if (l.name === "ledger" && !config.peerAddressesSet.ledger) config.ledgerAddress = dialable(l.address);
    if (l.name === "admin" && !config.peerAddressesSet.admin) config.adminAddress = dialable(l.address);
  }
}

function dialable(a: { host: string; port: number }): { host: string; port: number } {
  return a.host === "0.0.0.0" || a.host === "::" ? { host: "127.0.0.1", port: a.port } : a;
}

/**
 * Creates the data directory, or says in one line naming KEYCAP_DATA_DIR why it cannot be
 * one (a file in the way used to surface as a bare ENOTDIR from whichever file came first).
 */
function ensureDataDir(dir: string): void {
  try {
    fs.mkdirSync(dir, { recursive: true });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? "unknown error";
    if (code === "EEXIST" || code === "ENOTDIR") {
      let p = dir;
      while (!fs.existsSync(p) && path.dirname(p) !== p) p = path.dirname(p);
      throw new ConfigError("KEYCAP_DATA_DIR", `${p} is a file, not a directory`);
    }
    throw new ConfigError("KEYCAP_DATA_DIR", `cannot create ${dir} (${code})`);
  }
  if (!fs.statSync(dir).isDirectory()) throw new ConfigError("KEYCAP_DATA_DIR", `${dir} is not a directory`);
}

function failStart(err: unknown): never {
  const message = err instanceof ConfigError ? err.message : err instanceof Error ? err.message : String(err);
  process.stderr.write(`keycap: ${message.split("\n")[0]}\n`);
  process.exit(2);
}
