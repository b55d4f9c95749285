/**
 * `keycap mcp`'s own settings, from the environment (the kernel address, MongoDB, the data
 * directory and the runtime credential are the same settings every keycap process reads).
 * Each is validated at start; a bad value stops the start with one line naming it.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { ConfigError, parseHostPort, type HostPort } from "../../common/src/config";
import { isRunModeName, RUN_MODE_NAMES, type RunModeRequest } from "./run-mode";

export interface McpOptions {
  /** KEYCAP_MCP_TIMEOUT_MS: how long an upstream tools/call may take before it counts as unanswered. Default 60000. */
  timeoutMs: number;
  /** KEYCAP_MCP_WAIT_MS: how long a call waits for one with the same key in flight. Default 30000. */
  waitMs: number;
  /** KEYCAP_MCP_RUN_ID: run id of calls whose `_meta` names none; overrides the policy's `run_id`. */
  runId: string | undefined;
  /**
   * KEYCAP_MCP_RUN_MODE (live, replay or shadow; default live), KEYCAP_MCP_REPLAY_OF (the
   * recorded run of a replay), KEYCAP_MCP_SHADOWS (the live run a shadow run shadows): the mode
   * of calls whose `_meta` names none (ADR 0029).
   */
  runMode: RunModeRequest;
  /** KEYCAP_MCP_RESULT_TTL_SECONDS: how long a stored result is replayed; after it, the same key is a new call (and effect). Default 604800 (7 days); 0 keeps results forever. */
  resultTtlSeconds: number;
  /** KEYCAP_MCP_LISTEN: serve Streamable HTTP here instead of stdio (off loopback: with TLS and a token). Default: unset, stdio. */
  listen: HostPort | undefined;
  /** KEYCAP_MCP_TLS_CERT_FILE / KEYCAP_MCP_TLS_KEY_FILE, else the all-listener KEYCAP_TLS_CERT_FILE / KEYCAP_TLS_KEY_FILE: HTTPS toward hosts. */
  tls: { certFile: string; keyFile: string } | undefined;
  /** KEYCAP_MCP_TOKEN, else the file KEYCAP_MCP_TOKEN_FILE: the bearer credential every HTTP request from a host must carry. */
  token: string | undefined;
}

type Env = Readonly<Record<string, string | undefined>>;

export function loadMcpOptions(env: Env = process.env): McpOptions {
  const runId = env["KEYCAP_MCP_RUN_ID"]?.trim() || undefined;
  if (runId !== undefined && runId.length > 128) throw new ConfigError("KEYCAP_MCP_RUN_ID", "at most 128 characters");
  return {
    timeoutMs: millis(env, "KEYCAP_MCP_TIMEOUT_MS", 60_000, 100, 3_600_000),
    waitMs: millis(env, "KEYCAP_MCP_WAIT_MS", 30_000, 0, 3_600_000),
    runId,
    runMode: runModeOf(env),
    resultTtlSeconds: whole(env, "KEYCAP_MCP_RESULT_TTL_SECONDS", 604_800, 0, 10 * 365 * 86_400),
    listen: env["KEYCAP_MCP_LISTEN"]?.trim() ? parseHostPort("KEYCAP_MCP_LISTEN", env["KEYCAP_MCP_LISTEN"].trim()) : undefined,
    tls: httpTls(env),
    token: hostToken(env),
  };
}

function runModeOf(env: Env): RunModeRequest {
  const mode = setting(env, "KEYCAP_MCP_RUN_MODE") ?? "live";
  if (!isRunModeName(mode)) throw new ConfigError("KEYCAP_MCP_RUN_MODE", `expected one of ${RUN_MODE_NAMES.join(", ")}, got ${JSON.stringify(mode)}`);
  const replayOf = setting(env, "KEYCAP_MCP_REPLAY_OF");
  const shadows = setting(env, "KEYCAP_MCP_SHADOWS");
  if (mode === "replay" && replayOf === undefined)
    throw new ConfigError("KEYCAP_MCP_REPLAY_OF", "a replay (KEYCAP_MCP_RUN_MODE=replay) names the recorded run it replays");
  return { mode, ...(replayOf !== undefined ? { replayOf } : {}), ...(shadows !== undefined ? { shadows } : {}) };
}

function setting(env: Env, name: string): string | undefined {
  const v = env[name]?.trim();
  return v === undefined || v === "" ? undefined : v;
}

function httpTls(env: Env): McpOptions["tls"] {
  const certFile = setting(env, "KEYCAP_MCP_TLS_CERT_FILE") ?? setting(env, "KEYCAP_TLS_CERT_FILE");
  const keyFile = setting(env, "KEYCAP_MCP_TLS_KEY_FILE") ?? setting(env, "KEYCAP_TLS_KEY_FILE");
  if (certFile === undefined && keyFile === undefined) return undefined;
  if (certFile === undefined || keyFile === undefined) {
    throw new ConfigError(
      certFile === undefined ? "KEYCAP_MCP_TLS_CERT_FILE" : "KEYCAP_MCP_TLS_KEY_FILE",
      "HTTPS needs both a certificate file and a key file",
    );
  }
  return { certFile: path.resolve(certFile), keyFile: path.resolve(keyFile) };
}

/** The host credential: printable ASCII without spaces, at least 16 characters (it guards a listener off loopback). */
function hostToken(env: Env): string | undefined {
  let token = setting(env, "KEYCAP_MCP_TOKEN");
  let from = "KEYCAP_MCP_TOKEN";
  const file = setting(env, "KEYCAP_MCP_TOKEN_FILE");
  if (token === undefined && file !== undefined) {
    from = "KEYCAP_MCP_TOKEN_FILE";
    try {
      token = fs.readFileSync(path.resolve(file), "utf8").trim();
    } catch (err) {
      throw new ConfigError(from, `${file} cannot be read (${(err as NodeJS.ErrnoException).code ?? "unknown error"})`);
    }
  }
  if (token === undefined) return undefined;
  if (!/^[\x21-\x7e]{16,4096}$/.test(token)) throw new ConfigError(from, "must be 16 to 4096 printable ASCII characters without spaces");
  return token;
}

function millis(env: Env, name: string, def: number, min: number, max: number): number {
  return whole(env, name, def, min, max, "milliseconds");
}

function whole(env: Env, name: string, def: number, min: number, max: number, unit = "seconds"): number {
  const raw = env[name]?.trim();
  if (raw === undefined || raw === "") return def;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n < min || n > max) throw new ConfigError(name, `expected whole ${unit} from ${min} to ${max}, got ${JSON.stringify(raw)}`);
  return n;
}
