import * as path from "node:path";
import { CLOCK_TOLERANCE_SECONDS, DEFAULT_AUDIENCE, DEFAULT_ISSUER, DEFAULT_LIFETIME_SECONDS, MAX_LIFETIME_SECONDS } from "./capability-lifetime";
import { resolveDataDir } from "./data-dir";
import { LOG_FORMATS, type LogFormat, type LogLevel } from "./logger";
import { loadTlsSettings, type TlsSettings } from "./tls-config";

/**
 * A configuration value that cannot be used. Its message is one line that names
 * the setting; `main` prints it and exits non-zero.
 */
export class ConfigError extends Error {
  constructor(
    readonly setting: string,
    problem: string,
  ) {
    super(`${setting}: ${problem}`);
    this.name = "ConfigError";
  }
}

/** A `host:port` to listen on or dial. Port 0 asks the OS for a free port. */
export interface HostPort {
  host: string;
  port: number;
}

export function formatHostPort(a: HostPort): string {
  return a.host.includes(":") ? `[${a.host}]:${a.port}` : `${a.host}:${a.port}`;
}

/** Parses `host:port` (or `[v6]:port`), naming `setting` in the error. */
export function parseHostPort(setting: string, raw: string): HostPort {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([A-Za-z0-9.-]+)):([0-9]+)$/.exec(raw.trim());
  if (!m) throw new ConfigError(setting, `expected host:port, got ${JSON.stringify(raw)}`);
  const port = Number(m[3]);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new ConfigError(setting, `port must be 0-65535, got ${JSON.stringify(m[3])}`);
  }
  return { host: (m[1] ?? m[2]) as string, port };
}

type Env = Readonly<Record<string, string | undefined>>;

function str(env: Env, name: string): string | undefined {
  const v = env[name];
  return v === undefined || v.trim() === "" ? undefined : v.trim();
}

function int(env: Env, name: string, def: number, min: number, max: number): number {
  const raw = str(env, name);
  if (raw === undefined) return def;
  if (!/^[0-9]+$/.test(raw)) throw new ConfigError(name, `expected an integer, got ${JSON.stringify(raw)}`);
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(name, `must be between ${min} and ${max}, got ${n}`);
  return n;
}

function hostPort(env: Env, name: string, def: string): HostPort {
  return parseHostPort(name, str(env, name) ?? def);
}

const LOG_LEVELS: readonly LogLevel[] = ["debug", "info", "warn", "error", "silent"];

/** Every setting of DESIGN §8 and the limits docs/operating.md states, defaults applied. */
export interface KeycapConfig {
  kernelListen: HostPort;
  ledgerListen: HostPort;
  adminListen: HostPort;
  /** KEYCAP_CONSOLE_LISTEN: where the web console serves; undefined: `keycap serve all` starts none. */
  consoleListen: HostPort | undefined;
  /** KEYCAP_GATEWAY_LISTEN: the HTTP effect gateway's gRPC address; undefined: `keycap serve all` starts none. */
  gatewayListen: HostPort | undefined;
  /** How long the gateway waits for a destination's answer (ms). */
  gatewayTimeoutMs: number;
  /** How long a forward waits for another forward of its key in flight before ABORTED IN_PROGRESS (ms). */
  gatewayWaitMs: number;
  /** Largest request body a forward may carry (bytes). */
  gatewayMaxRequestBytes: number;
  /** Longest response body stored and returned; longer bodies are cut (bytes). */
  gatewayMaxResponseBytes: number;
  /** The ledger admin API operators' tools (the console) dial: KEYCAP_ADMIN_ADDRESS, else the admin listen address. */
  adminAddress: HostPort;
  /** Undefined: start the embedded default MongoDB. */
  mongodbUri: string | undefined;
  mongodbDatabase: string;
  /** How long to wait for MongoDB at start (ms). */
  mongodbTimeoutMs: number;
  /** Database-side time limit of every operator read (maxTimeMS), so an abandoned one cannot run on (ms). */
  operatorQueryTimeoutMs: number;
  dataDir: string;
  signingKeyFile: string;
  /** Retired signing keys stay published this long (s). */
  retiredKeyGraceSeconds: number;
  adminToken: string | undefined;
  adminTokenFile: string;
  /** Secret of the bootstrap runtime principal "local-runtime" (KEYCAP_RUNTIME_TOKEN); else its file. */
  runtimeToken: string | undefined;
  /** Where the bootstrap runtime secret is kept (generated at the kernel's first start). */
  runtimeTokenFile: string;
  /** KEYCAP_BOOTSTRAP_RUNTIME=0 turns the bootstrap runtime principal off. */
  bootstrapRuntime: boolean;
  /** How long a kernel replica trusts what it read about a principal or grant (ms): revocation delay. */
  principalCacheMs: number;
  /** TLS of the listeners and of peer connections. */
  tls: TlsSettings;
  /** Where the ledger fetches the kernel's JWKS (GetSigningKeys). */
  kernelAddress: HostPort;
  /** A static JWKS file for the ledger instead of kernelAddress. */
  jwksFile: string | undefined;
  /** Where the kernel asks the ledger about Queryable request ids. */
  ledgerAddress: HostPort;
  /** Which peer addresses were set explicitly (KEYCAP_*_ADDRESS): the others follow a listener bound in the same process. */
  peerAddressesSet: { kernel: boolean; ledger: boolean; admin: boolean };
  issuer: string;
  audience: string;
  capabilityTtlSeconds: number;
  capabilityMaxLifetimeSeconds: number;
  clockToleranceSeconds: number;
  maxArgumentsBytes: number;
  maxArgumentsDepth: number;
  maxPayloadBytes: number;
  /** Unauthenticated refusals recorded per peer per minute before they are summarised. */
  unauthenticatedAuditPerMinute: number;
  shutdownGraceMs: number;
  logLevel: LogLevel;
  /** KEYCAP_LOG_FORMAT: auto (pretty at a terminal, JSON otherwise), json or pretty. */
  logFormat: LogFormat;
  /** KEYCAP_METRICS_LISTEN: where this process serves Prometheus metrics; undefined: not at all. */
  metricsListen: HostPort | undefined;
  /** KEYCAP_METRICS_TOOL_LABELS: tool ids that keep their own metric label (the most frequent); the rest are "other". */
  metricsToolLabels: number;
  /** What is kept how long, and how the sweeper removes the rest (docs/retention.md). */
  retention: RetentionSettings;
}

/**
 * Retention (docs/retention.md, ADR 0031): how long each kind of record is kept, in seconds;
 * 0 keeps it forever. Spent single-use capabilities have no setting: they go once their
 * capability has expired (plus the clock tolerance), when a replay is refused as expired anyway.
 */
export interface RetentionSettings {
  /** KEYCAP_RETENTION_CALLS_SECONDS: completed calls, their completions and idle replay runs' positions. */
  callsSeconds: number;
  /** KEYCAP_RETENTION_REFUSALS_SECONDS: refusal audit records. */
  refusalsSeconds: number;
  /** KEYCAP_RETENTION_ENTRIES_SECONDS: ledger entries (the effects); default 0, kept. */
  entriesSeconds: number;
  /** KEYCAP_RETENTION_GATEWAY_RESULTS_SECONDS: the HTTP gateway's stored answers. */
  gatewayResultsSeconds: number;
  /** KEYCAP_RETENTION_SHADOW_ENTRIES_SECONDS: shadow runs' would-be effects (ADR 0028). */
  shadowEntriesSeconds: number;
  /** KEYCAP_RETENTION_SWEEP_INTERVAL_MS: how often a sweep runs (ms); 0 turns sweeping off. */
  sweepIntervalMs: number;
  /** KEYCAP_RETENTION_BATCH: most records one delete removes. */
  batch: number;
}

const DAY = 86_400;

/** The retention policy's settings; 0 keeps a kind of record forever. */
function retentionSettings(env: Env): RetentionSettings {
  const forever = 100 * 365 * DAY;
  const sweepIntervalMs = int(env, "KEYCAP_RETENTION_SWEEP_INTERVAL_MS", 60_000, 0, DAY * 1000);
  if (sweepIntervalMs > 0 && sweepIntervalMs < 100) throw new ConfigError("KEYCAP_RETENTION_SWEEP_INTERVAL_MS", "must be 0 (off) or at least 100");
  return {
    callsSeconds: int(env, "KEYCAP_RETENTION_CALLS_SECONDS", 7 * DAY, 0, forever),
    refusalsSeconds: int(env, "KEYCAP_RETENTION_REFUSALS_SECONDS", 30 * DAY, 0, forever),
    entriesSeconds: int(env, "KEYCAP_RETENTION_ENTRIES_SECONDS", 0, 0, forever),
    gatewayResultsSeconds: int(env, "KEYCAP_RETENTION_GATEWAY_RESULTS_SECONDS", 7 * DAY, 0, forever),
    shadowEntriesSeconds: int(env, "KEYCAP_RETENTION_SHADOW_ENTRIES_SECONDS", 7 * DAY, 0, forever),
    sweepIntervalMs,
    batch: int(env, "KEYCAP_RETENTION_BATCH", 1000, 1, 100_000),
  };
}

type CapabilitySettings = Pick<KeycapConfig, "issuer" | "audience" | "capabilityTtlSeconds" | "capabilityMaxLifetimeSeconds" | "clockToleranceSeconds">;

/** What the kernel mints and every verifier checks. */
function capabilitySettings(env: Env): CapabilitySettings {
  // The minter's own ceiling (capability-minter.ts): a larger value used to pass here and then
  // stop the kernel with a RangeError that named no setting.
  const capabilityTtlSeconds = int(env, "KEYCAP_CAPABILITY_TTL_SECONDS", DEFAULT_LIFETIME_SECONDS, 5, MAX_LIFETIME_SECONDS);
  const capabilityMaxLifetimeSeconds = int(env, "KEYCAP_CAPABILITY_MAX_LIFETIME_SECONDS", MAX_LIFETIME_SECONDS, 5, 86400);
  if (capabilityTtlSeconds > capabilityMaxLifetimeSeconds) {
    throw new ConfigError("KEYCAP_CAPABILITY_TTL_SECONDS", `must not exceed KEYCAP_CAPABILITY_MAX_LIFETIME_SECONDS (${capabilityMaxLifetimeSeconds})`);
  }
  return {
    issuer: str(env, "KEYCAP_ISSUER") ?? DEFAULT_ISSUER,
    audience: str(env, "KEYCAP_AUDIENCE") ?? DEFAULT_AUDIENCE,
    capabilityTtlSeconds,
    capabilityMaxLifetimeSeconds,
    clockToleranceSeconds: int(env, "KEYCAP_CLOCK_TOLERANCE_SECONDS", CLOCK_TOLERANCE_SECONDS, 0, 300),
  };
}

type GatewaySettings = Pick<KeycapConfig, "gatewayTimeoutMs" | "gatewayWaitMs" | "gatewayMaxRequestBytes" | "gatewayMaxResponseBytes">;

/** The HTTP effect gateway's limits. */
function gatewaySettings(env: Env): GatewaySettings {
  return {
    gatewayTimeoutMs: int(env, "KEYCAP_GATEWAY_TIMEOUT_MS", 10000, 100, 300000),
    gatewayWaitMs: int(env, "KEYCAP_GATEWAY_WAIT_MS", 15000, 0, 600000),
    gatewayMaxRequestBytes: int(env, "KEYCAP_GATEWAY_MAX_REQUEST_BYTES", 1024 * 1024, 0, 64 * 1024 * 1024),
    gatewayMaxResponseBytes: int(env, "KEYCAP_GATEWAY_MAX_RESPONSE_BYTES", 1024 * 1024, 0, 64 * 1024 * 1024),
  };
}

/** KEYCAP_LOG_LEVEL and KEYCAP_LOG_FORMAT. */
function logSettings(env: Env): Pick<KeycapConfig, "logLevel" | "logFormat"> {
  const logLevel = (str(env, "KEYCAP_LOG_LEVEL") ?? "info") as LogLevel;
  if (!LOG_LEVELS.includes(logLevel)) {
    throw new ConfigError("KEYCAP_LOG_LEVEL", `expected one of ${LOG_LEVELS.join(", ")}`);
  }
  const logFormat = (str(env, "KEYCAP_LOG_FORMAT") ?? "auto") as LogFormat;
  if (!LOG_FORMATS.includes(logFormat)) {
    throw new ConfigError("KEYCAP_LOG_FORMAT", `expected one of ${LOG_FORMATS.join(", ")}`);
  }
  return { logLevel, logFormat };
}

/** Reads and validates the environment. Throws ConfigError on the first bad value. */
export function loadConfig(env: Env = process.env): KeycapConfig {
  const dataDir = resolveDataDir(str(env, "KEYCAP_DATA_DIR"));
  const kernelListen = hostPort(env, "KEYCAP_KERNEL_LISTEN", "127.0.0.1:50051");
  const ledgerListen = hostPort(env, "KEYCAP_LEDGER_LISTEN", "127.0.0.1:50052");
  const adminListen = hostPort(env, "KEYCAP_ADMIN_LISTEN", "127.0.0.1:50053");

  const mongodbUri = str(env, "MONGODB_URI");
  if (mongodbUri !== undefined && !/^mongodb(\+srv)?:\/\/[^/]+/.test(mongodbUri)) {
    throw new ConfigError("MONGODB_URI", "expected mongodb://host[:port]/... or mongodb+srv://...");
  }
  const mongodbDatabase = str(env, "KEYCAP_MONGODB_DATABASE") ?? "keycap";
  if (!/^[A-Za-z0-9_-]{1,63}$/.test(mongodbDatabase)) {
    throw new ConfigError("KEYCAP_MONGODB_DATABASE", "expected 1-63 of [A-Za-z0-9_-]");
  }

  const jwksFile = str(env, "KEYCAP_JWKS_FILE");
  const ledgerAddress = hostPort(env, "KEYCAP_LEDGER_ADDRESS", str(env, "KEYCAP_LEDGER_LISTEN") ?? "127.0.0.1:50052");
  const bootstrap = str(env, "KEYCAP_BOOTSTRAP_RUNTIME") ?? "1";
  if (bootstrap !== "0" && bootstrap !== "1") throw new ConfigError("KEYCAP_BOOTSTRAP_RUNTIME", `expected 0 or 1, got ${JSON.stringify(bootstrap)}`);
  const runtimeToken = str(env, "KEYCAP_RUNTIME_TOKEN");
  if (runtimeToken !== undefined && !/^[A-Za-z0-9\-._~+/]{16,}=*$/.test(runtimeToken)) {
    throw new ConfigError("KEYCAP_RUNTIME_TOKEN", "must be at least 16 characters of printable ASCII without spaces");
  }
  const consoleListen = str(env, "KEYCAP_CONSOLE_LISTEN");
  const gatewayListenRaw = str(env, "KEYCAP_GATEWAY_LISTEN");
  const gatewayListen = gatewayListenRaw === undefined ? undefined : parseHostPort("KEYCAP_GATEWAY_LISTEN", gatewayListenRaw);
  const metricsRaw = str(env, "KEYCAP_METRICS_LISTEN");
  const metricsListen = metricsRaw === undefined ? undefined : parseHostPort("KEYCAP_METRICS_LISTEN", metricsRaw);
  return {
    kernelListen,
    ledgerListen,
    adminListen,
    consoleListen: consoleListen === undefined ? undefined : parseHostPort("KEYCAP_CONSOLE_LISTEN", consoleListen),
    gatewayListen,
    ...gatewaySettings(env),
    adminAddress: hostPort(env, "KEYCAP_ADMIN_ADDRESS", str(env, "KEYCAP_ADMIN_LISTEN") ?? "127.0.0.1:50053"),
    mongodbUri,
    mongodbDatabase,
    mongodbTimeoutMs: int(env, "KEYCAP_MONGODB_TIMEOUT_MS", 5000, 100, 120000),
    operatorQueryTimeoutMs: int(env, "KEYCAP_OPERATOR_QUERY_TIMEOUT_MS", 5000, 100, 600000),
    dataDir,
    signingKeyFile: path.resolve(str(env, "KEYCAP_SIGNING_KEY_FILE") ?? path.join(dataDir, "signing-keys.json")),
    retiredKeyGraceSeconds: int(env, "KEYCAP_RETIRED_KEY_GRACE_SECONDS", 86400, 0, 30 * 86400),
    adminToken: str(env, "KEYCAP_ADMIN_TOKEN"),
    adminTokenFile: path.resolve(str(env, "KEYCAP_ADMIN_TOKEN_FILE") ?? path.join(dataDir, "admin-token")),
    kernelAddress: hostPort(env, "KEYCAP_KERNEL_ADDRESS", str(env, "KEYCAP_KERNEL_LISTEN") ?? "127.0.0.1:50051"),
    peerAddressesSet: {
      kernel: str(env, "KEYCAP_KERNEL_ADDRESS") !== undefined,
      ledger: str(env, "KEYCAP_LEDGER_ADDRESS") !== undefined,
      admin: str(env, "KEYCAP_ADMIN_ADDRESS") !== undefined,
    },
    jwksFile: jwksFile === undefined ? undefined : path.resolve(jwksFile),
    ledgerAddress,
    runtimeToken,
    runtimeTokenFile: path.resolve(str(env, "KEYCAP_RUNTIME_TOKEN_FILE") ?? path.join(dataDir, "runtime-token")),
    bootstrapRuntime: bootstrap === "1",
    principalCacheMs: int(env, "KEYCAP_PRINCIPAL_CACHE_MS", 2000, 0, 60000),
    tls: loadTlsSettings(env, { kernelListen, ledgerListen, adminListen, ledgerAddress, gatewayListen, metricsListen }),
    ...capabilitySettings(env),
    maxArgumentsBytes: int(env, "KEYCAP_MAX_ARGUMENTS_BYTES", 65536, 2, 16 * 1024 * 1024),
    maxArgumentsDepth: int(env, "KEYCAP_MAX_ARGUMENTS_DEPTH", 32, 1, 1000),
    maxPayloadBytes: int(env, "KEYCAP_MAX_PAYLOAD_BYTES", 1024 * 1024, 1, 64 * 1024 * 1024),
    unauthenticatedAuditPerMinute: int(env, "KEYCAP_UNAUTHENTICATED_AUDIT_PER_MINUTE", 60, 0, 1_000_000),
    shutdownGraceMs: int(env, "KEYCAP_SHUTDOWN_GRACE_MS", 10000, 0, 600000),
    ...logSettings(env),
    metricsListen,
    metricsToolLabels: int(env, "KEYCAP_METRICS_TOOL_LABELS", 50, 0, 1000),
    retention: retentionSettings(env),
  };
}
