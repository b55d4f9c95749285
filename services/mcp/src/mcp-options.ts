/**
 * `keycap mcp`'s own settings, from the environment (the kernel address, MongoDB, the data
 * directory and the runtime credential are the same settings every keycap process reads).
 * Each is validated at start; a bad value stops the start with one line naming it.
 */
import { ConfigError, parseHostPort, type HostPort } from "../../common/src/config";

export interface McpOptions {
  /** KEYCAP_MCP_TIMEOUT_MS: how long an upstream tools/call may take before it counts as unanswered. Default 60000. */
  timeoutMs: number;
  /** KEYCAP_MCP_WAIT_MS: how long a call waits for one with the same key in flight. Default 30000. */
  waitMs: number;
  /** KEYCAP_MCP_RUN_ID: run id of calls whose `_meta` names none; overrides the policy's `run_id`. */
  runId: string | undefined;
  /** KEYCAP_MCP_RESULT_TTL_SECONDS: how long a stored result is replayed; after it, the same key is a new call (and effect). Default 604800 (7 days); 0 keeps results forever. */
  resultTtlSeconds: number;
  /** KEYCAP_MCP_LISTEN: serve Streamable HTTP here (loopback only) instead of stdio. Default: unset, stdio. */
  listen: HostPort | undefined;
}

type Env = Readonly<Record<string, string | undefined>>;

export function loadMcpOptions(env: Env = process.env): McpOptions {
  const runId = env["KEYCAP_MCP_RUN_ID"]?.trim() || undefined;
  if (runId !== undefined && runId.length > 128) throw new ConfigError("KEYCAP_MCP_RUN_ID", "at most 128 characters");
  return {
    timeoutMs: millis(env, "KEYCAP_MCP_TIMEOUT_MS", 60_000, 100, 3_600_000),
    waitMs: millis(env, "KEYCAP_MCP_WAIT_MS", 30_000, 0, 3_600_000),
    runId,
    resultTtlSeconds: whole(env, "KEYCAP_MCP_RESULT_TTL_SECONDS", 604_800, 0, 10 * 365 * 86_400),
    listen: env["KEYCAP_MCP_LISTEN"]?.trim() ? parseHostPort("KEYCAP_MCP_LISTEN", env["KEYCAP_MCP_LISTEN"].trim()) : undefined,
  };
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
