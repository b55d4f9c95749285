/**
 * The run mode of a host's tools/call (ADR 0028, 0029): named in the call's `_meta`
 * (`io.keycap/run-mode`, `io.keycap/replay-of`, `io.keycap/shadows`), else the gateway's
 * KEYCAP_MCP_RUN_MODE / KEYCAP_MCP_REPLAY_OF / KEYCAP_MCP_SHADOWS, so a host that cannot set
 * `_meta` can still be run as a replay or a shadow. The kernel checks the combination
 * (a replay needs the recorded run and a run id of its own: INVALID_RUN_MODE).
 */
import { ErrorCode } from "@modelcontextprotocol/sdk/types.js";
import { CAPABILITY_SANDBOX_TYP, SANDBOX_MODES, type SandboxMode } from "../../capability/src/claims";
import { Reasons } from "../../common/src/refuse";
import { keycapMcpError } from "./call-errors";
import { META_REPLAY_OF, META_RUN_MODE, META_SHADOWS } from "./meta-keys";

/** A run mode by name. */
export type RunModeName = "live" | SandboxMode;

export const RUN_MODE_NAMES: readonly RunModeName[] = ["live", ...SANDBOX_MODES];

/** The mode a call is begun in, and the run it replays or shadows. */
export interface RunModeRequest {
  mode: RunModeName;
  /** mode "replay": the recorded run. */
  replayOf?: string;
  /** mode "shadow" (optional): the live run shadowed. */
  shadows?: string;
}

export const LIVE: RunModeRequest = { mode: "live" };

export function isRunModeName(v: unknown): v is RunModeName {
  return typeof v === "string" && (RUN_MODE_NAMES as readonly string[]).includes(v);
}

/** The call's mode: its `_meta`'s, field by field, else the gateway's default. Throws McpError INVALID_RUN_MODE. */
export function requestedRunMode(meta: Record<string, unknown> | undefined, defaults: RunModeRequest, toolId: string): RunModeRequest {
  const named = meta?.[META_RUN_MODE];
  if (named !== undefined && !isRunModeName(named)) {
    throw keycapMcpError(ErrorCode.InvalidParams, Reasons.INVALID_RUN_MODE, `_meta ${META_RUN_MODE} must be one of ${RUN_MODE_NAMES.join(", ")}`, toolId, {
      field: META_RUN_MODE,
    });
  }
  const text = (key: string, fallback: string | undefined): string | undefined => {
    const v = meta?.[key];
    if (v === undefined) return fallback;
    if (typeof v === "string") return v;
    throw keycapMcpError(ErrorCode.InvalidParams, Reasons.INVALID_RUN_MODE, `_meta ${key} must be a string (a run id)`, toolId, { field: key });
  };
  const replayOf = text(META_REPLAY_OF, defaults.replayOf);
  const shadows = text(META_SHADOWS, defaults.shadows);
  return { mode: named ?? defaults.mode, ...(replayOf !== undefined ? { replayOf } : {}), ...(shadows !== undefined ? { shadows } : {}) };
}

/**
 * The sandbox mode a capability says it is of (its `mode` claim, or its sandbox `typ`), read
 * without verifying it: the gateway got it from the kernel, and reads it only so that a
 * sandbox capability is never sent upstream even if the mode it asked for were lost on the way.
 */
export function capabilityMode(token: string): SandboxMode | undefined {
  const [header, payload] = token.split(".");
  const decode = (part: string | undefined): Record<string, unknown> => {
    try {
      const v: unknown = JSON.parse(Buffer.from(part ?? "", "base64url").toString("utf8"));
      return typeof v === "object" && v !== null ? (v as Record<string, unknown>) : {};
    } catch {
      return {};
    }
  };
  const mode = decode(payload)["mode"];
  if ((SANDBOX_MODES as readonly unknown[]).includes(mode)) return mode as SandboxMode;
  // A sandbox typ without a valid mode is no kernel's capability; never live either way.
  return decode(header)["typ"] === CAPABILITY_SANDBOX_TYP ? "shadow" : undefined;
}
