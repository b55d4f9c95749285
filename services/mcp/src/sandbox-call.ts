/**
 * A governed call of a replay or shadow run (ADR 0028, 0029): never sent upstream.
 *
 * - Unsafe: refused SANDBOX_UNSAFE_DENIED. The kernel refuses to begin one, so this is the
 *   gateway's own check behind it: a sandbox capability never reaches an Unsafe tool even if
 *   the kernel were wrong. Recorded against the tool id in the gateway's refusal store.
 * - Replay: answered from the result the gateway stored for the recorded call's slot (the
 *   replay's key is the recorded key, its request id the recorded one: the kernel matched
 *   them), REPLAY_NO_RECORDED_EFFECT when the recorded call has no stored final result.
 * - Shadow: the call the gateway would have sent (upstream, tool, a hash of the arguments,
 *   which the kernel journals in full) is recorded in the ledger's shadow store under the
 *   shadow key or request id; the host gets a result marked `io.keycap/shadowed`.
 */
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import type { SandboxMode } from "../../capability/src/claims";
import type { Call } from "../../../gen/ts/keycap/kernel/v1/kernel";
import { codeName, KeycapError } from "../../common/src/errors";
import { mcpErrorOf } from "../../common/src/mcp-contract";
import type { RejectionInput } from "../../common/src/rejection-audit";
import { Reasons, refuse } from "../../common/src/refuse";
import type { ShadowRecorder } from "../../common/src/shadow-recorder";
import type { GovernedTool } from "./governed-tools";
import {
  META_ARGUMENTS_MISMATCH,
  META_CALL_ID,
  META_IDEMPOTENCY_KEY,
  META_NOT_SENT,
  META_RECORDED_AT,
  META_RECORDED_CALL_ID,
  META_REPLAY,
  META_REQUEST_ID,
  META_RUN_MODE,
  META_SHADOWED,
} from "./meta-keys";
import type { ResultStore } from "./result-store";

/** A begun call of a sandbox run. */
export interface SandboxCall {
  tool: GovernedTool;
  call: Call;
  capability: string;
  /** SHA-256 of the canonical arguments, as the result store keeps it. */
  argumentsSha256: string;
  /** The slot a live call of it would hold (key or request id); none for Unsafe. */
  slot: string | undefined;
  /** Replay: the recorded call the kernel matched. */
  recordedCallId: string | undefined;
}

export interface SandboxCallOptions {
  store: ResultStore;
  shadow: ShadowRecorder;
  /** The gateway's refusal store (service "mcp"). */
  refusals?: { record(input: RejectionInput): Promise<void> };
  /** Settles the kernel call (never throws). */
  complete(callId: string, outcome: "succeeded" | "failed", detail: string): Promise<void>;
}

export class SandboxCalls {
  constructor(private readonly opts: SandboxCallOptions) {}

  /** Answers one sandbox call without sending it. Throws McpError for refusals. */
  async answer(c: SandboxCall, mode: SandboxMode): Promise<CallToolResult> {
    if (c.tool.policy.class === "unsafe" || c.slot === undefined) {
      return this.refuse(c, refuse(Reasons.SANDBOX_UNSAFE_DENIED, `tool ${c.tool.toolId} is Unsafe: it is denied outright in a ${mode} run`, { mode }));
    }
    return mode === "replay" ? this.replay(c, c.slot) : this.shadow(c);
  }

  private async replay(c: SandboxCall, slot: string): Promise<CallToolResult> {
    const seen = await this.opts.store.get(slot);
    if (seen?.state !== "done" || seen.resultJson === undefined) {
      const why = seen ? `its result is not final (${seen.state})` : "the gateway stored no result for it";
      return this.refuse(
        c,
        refuse(
          Reasons.REPLAY_NO_RECORDED_EFFECT,
          `the recorded call ${c.recordedCallId ?? "(unknown)"} was not answered through this gateway: ${why}; a replay never sends`,
          {
            mode: "replay",
            recorded_call_id: c.recordedCallId ?? "",
          },
        ),
      );
    }
    const result = JSON.parse(seen.resultJson) as CallToolResult;
    await this.opts.complete(c.call.callId, result.isError === true ? "failed" : "succeeded", `replay: the recorded result of call ${seen.callId}`);
    return {
      ...result,
      _meta: {
        ...(result._meta ?? {}),
        [META_REPLAY]: true,
        [META_RUN_MODE]: "replay",
        [META_RECORDED_CALL_ID]: c.recordedCallId ?? seen.callId,
        ...(seen.argumentsSha256 !== undefined && seen.argumentsSha256 !== c.argumentsSha256 ? { [META_ARGUMENTS_MISMATCH]: true } : {}),
        [META_CALL_ID]: c.call.callId,
        ...(c.call.key ? { [META_IDEMPOTENCY_KEY]: c.call.key } : {}),
        ...(seen.recordedAt ? { [META_RECORDED_AT]: seen.recordedAt.toISOString() } : {}),
      },
    };
  }

  private async shadow(c: SandboxCall): Promise<CallToolResult> {
    const { call, tool } = c;
    const target = tool.policy.class === "idempotent" ? { key: call.key } : { requestId: call.requestId };
    let recorded;
    try {
      recorded = await this.opts.shadow.record(c.capability, target, {
        gateway: "mcp",
        upstream: tool.upstream,
        tool: tool.name,
        arguments_sha256: c.argumentsSha256,
      });
    } catch (err) {
      if (!(err instanceof KeycapError)) throw err;
      await this.opts.complete(call.callId, "failed", `shadow: the would-be effect was not recorded (${err.reason})`);
      throw mcpErrorOf(err, tool.toolId);
    }
    await this.opts.complete(call.callId, "succeeded", `shadow: not sent; would-be effect ${recorded.entryId} in the shadow store`);
    const text = `keycap: shadowed. This call of ${tool.name} belongs to a shadow run: it was not sent to the tool, and the call it would have made is recorded in keycap's shadow store (entry ${recorded.entryId}).`;
    return {
      content: [{ type: "text", text }],
      _meta: {
        [META_SHADOWED]: true,
        [META_RUN_MODE]: "shadow",
        [META_NOT_SENT]: true,
        ...(recorded.payloadMismatch ? { [META_ARGUMENTS_MISMATCH]: true } : {}),
        [META_CALL_ID]: call.callId,
        ...(call.key ? { [META_IDEMPOTENCY_KEY]: call.key } : {}),
        ...(call.requestId ? { [META_REQUEST_ID]: call.requestId } : {}),
        ...(recorded.recordedAt ? { [META_RECORDED_AT]: recorded.recordedAt.toISOString() } : {}),
      },
    };
  }

  /** Records the refusal against the tool, settles the kernel call as failed, and throws it to the host. */
  private async refuse(c: SandboxCall, err: KeycapError): Promise<never> {
    await this.opts.refusals
      ?.record({
        method: "tools/call",
        reason: err.reason,
        code: codeName(err.code),
        toolId: c.tool.toolId,
        // The tool is the gateway's own (its policy's), and the caller is the gateway's host.
        toolIdVerified: true,
        callId: c.call.callId,
        capabilityKey: c.call.key,
        capabilityRequestId: c.call.requestId,
        effect: c.tool.policy.class,
        peer: "host",
        message: err.message,
      })
      .catch(() => undefined);
    await this.opts.complete(c.call.callId, "failed", `refused ${err.reason}`);
    throw mcpErrorOf(err, c.tool.toolId);
  }
}
