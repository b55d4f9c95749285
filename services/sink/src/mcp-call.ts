/**
 * What a governed MCP tool's handler learns about its call: the verified capability, and the
 * key (or request id) to pass on as its own downstream Idempotency-Key. Looked up by the
 * request's `_meta` object, which the SDK hands the handler as `extra._meta`: a WeakMap, not
 * a `_meta` member, so nothing a client sends can pose as a verified call.
 */
import type { EffectName, VerifiedCapability } from "../../capability/src";

/** A tools/call the middleware admitted. */
export interface KeycapToolCall {
  /** The MCP tool name called. */
  tool: string;
  /** Its kernel tool id (`mcp:<server>/<tool>` unless overridden). */
  toolId: string;
  effect: EffectName;
  /** The kernel's call id. */
  callId: string;
  /** Idempotent: the kernel-derived key, re-derived from these very arguments. */
  key?: string;
  /** Queryable: the request id. */
  requestId?: string;
  /**
   * What to send downstream as `Idempotency-Key`: the key (Idempotent) or the request id
   * (Queryable); undefined for Unsafe, whose capability was single-use instead.
   */
  idempotencyKey?: string;
  capability: VerifiedCapability;
}

const admitted = new WeakMap<object, KeycapToolCall>();

export function rememberCall(meta: object, call: KeycapToolCall): void {
  admitted.set(meta, call);
}

/**
 * The admitted call a governed tool's handler is running for.
 *
 * @param extra the handler's second argument (`RequestHandlerExtra`), or anything with its `_meta`.
 * @throws Error when the call was not admitted by keycap's middleware (the tool is not governed,
 *   or the transport was not guarded): a wiring mistake, which must not run an effect unchecked.
 * @example
 * server.registerTool("charge", { inputSchema }, async (args, extra) => {
 *   const { idempotencyKey } = keycapCallOf(extra);
 *   await fetch(api, { method: "POST", headers: { "Idempotency-Key": idempotencyKey! }, body });
 * });
 */
export function keycapCallOf(extra: { _meta?: object | undefined }): KeycapToolCall {
  const call = extra._meta ? admitted.get(extra._meta) : undefined;
  if (!call) throw new Error("this tools/call was not admitted by keycap: govern the tool and connect the server with sink.guard(transport)");
  return call;
}
