/**
 * keycap's middleware for MCP servers built with the official TypeScript SDK (issue 29): the
 * author marks which tools are governed, and a `tools/call` of one runs its handler only under
 * a genuine capability for exactly that tool and, for an Idempotent tool, exactly these
 * arguments. Every other call is refused before the handler runs, as an MCP error whose data
 * carries keycap's reason, and recorded in keycap's refusal store as `sink:<name>` against the
 * tool id. Built on the sink SDK: the same verifier profile, spent store and refusal records.
 *
 * Order of the checks, fixed so every language gives the same reason: the capability's
 * verification (CAPABILITY_MISSING, EXPIRED, BAD_SIGNATURE, …), the tool (TOOL_NOT_ACCEPTED),
 * the `_meta` idempotency key against the capability's (KEY_MISMATCH), single use of an
 * Unsafe or Queryable capability (CAPABILITY_REUSED), then the arguments against an Idempotent
 * capability's key (CLAIM_MISSING without a derivation claim, KEY_MISMATCH).
 */
import type { McpError } from "@modelcontextprotocol/sdk/types.js";
import type { CapabilityVerifierOptions, PublicKeySource, VerifiedCapability } from "../../capability/src";
import { KeycapError } from "../../common/src/errors";
import type { JsonLimits } from "../../common/src/domain/strict-json";
import { kernelToolId, META_CAPABILITY, META_IDEMPOTENCY_KEY, mcpErrorOf } from "../../common/src/mcp-contract";
import { Reasons, refuse } from "../../common/src/refuse";
import { bindArguments } from "./argument-binding";
import type { KeycapToolCall } from "./mcp-call";
import { GuardedTransport, type Transport } from "./mcp-transport";
import { Sink, type AdmissionContext, type RefusalRecorder, type SinkRefusalEvent, type SpentStore } from "../../capability/src";

/** How a governed tool is known to the kernel: `true` for `mcp:<name>/<tool>`, or its tool id. */
export type GovernedTool = true | { toolId: string };

/** Options of {@link McpSink}. */
export interface McpSinkOptions {
  /**
   * The server's name: refusals are recorded as `sink:<name>` (1-63 of [a-z0-9._-]), and a
   * governed tool's id defaults to `mcp:<name>/<tool>`, so name the server as the gateway's
   * policy names it as an upstream.
   */
  name: string;
  /** The governed tools, by MCP tool name. A tool not named here is not governed: its calls pass untouched. */
  tools: Readonly<Record<string, GovernedTool>>;
  /** The kernel's public keys ({@link KernelKeySource}, or a FileJwksSource). */
  keys: PublicKeySource;
  /** Verification options (issuer, audience, limits, clock); defaults are the ledger's. */
  verifier?: CapabilityVerifierOptions;
  /** Required when a governed tool is Unsafe or Queryable: spends each capability once. */
  spentStore?: SpentStore;
  /** keycap's refusal store ({@link openSinkRefusalStore}); without it refusals reach only `onRefusal`. */
  refusals?: RefusalRecorder;
  /** Called for every refusal, after it is recorded, with the called tool's id. Must not throw. */
  onRefusal?: (event: SinkRefusalEvent) => void;
  /** Limits of the arguments' strict parse when re-deriving a key; the kernel's defaults (64 KiB, depth 32) unless it runs with others. */
  argumentLimits?: JsonLimits;
  now?: () => number;
}

/** One governed tool: its id and a sink that serves it alone. */
interface Governed {
  toolId: string;
  sink: Sink;
}

/** The parts of `tools/call` params the middleware reads. */
export interface ToolCallParams {
  arguments?: unknown;
  _meta?: unknown;
}

/**
 * Admits governed tools/calls of an MCP server.
 *
 * @example
 * const sink = new McpSink({ name: "payments", tools: { charge: true }, keys: new KernelKeySource(kernel), spentStore, refusals });
 * const server = new McpServer({ name: "payments", version: "1.0.0" });
 * server.registerTool("charge", { inputSchema }, async (args, extra) => charge(args, keycapCallOf(extra).idempotencyKey!));
 * await server.connect(sink.guard(new StdioServerTransport()));
 */
export class McpSink {
  readonly name: string;
  private readonly governed = new Map<string, Governed>();

  constructor(private readonly opts: McpSinkOptions) {
    this.name = opts.name;
    for (const [tool, how] of Object.entries(opts.tools)) {
      const toolId = how === true ? kernelToolId(opts.name, tool) : how.toolId;
      this.governed.set(tool, { toolId, sink: this.sinkFor(toolId) });
    }
    if (this.governed.size === 0) throw new RangeError("McpSink: name the governed tools (tools: { <tool>: true })");
  }

  /** The governed tool's kernel tool id, or undefined when `tool` is not governed. */
  toolIdOf(tool: string): string | undefined {
    return this.governed.get(tool)?.toolId;
  }

  /**
   * Admits one tools/call.
   *
   * @returns the admitted call, or undefined when the tool is not governed.
   * @throws McpError carrying keycap's reason ({@link KeycapErrorData}) when it is refused; the refusal is recorded first.
   */
  async admit(tool: string, params: ToolCallParams | undefined, peer = "mcp"): Promise<KeycapToolCall | undefined> {
    const governed = this.governed.get(tool);
    if (!governed) return undefined;
    try {
      return await this.admitGoverned(tool, governed, params, peer);
    } catch (err) {
      // Admission rejects with KeycapErrors only; anything else is a defect, said as one.
      throw this.mcpError(err instanceof KeycapError ? err : refuse(Reasons.INTERNAL, "the MCP sink failed to admit the call"), governed.toolId);
    }
  }

  /**
   * The transport, with every governed tools/call admitted before the server sees it.
   *
   * @example await server.connect(sink.guard(new StdioServerTransport()));
   */
  guard(transport: Transport): GuardedTransport {
    return new GuardedTransport(transport, this);
  }

  /** The refusal as an MCP error (also for the transport's own failures). */
  mcpError(err: KeycapError, toolId: string): McpError {
    return mcpErrorOf(err, toolId);
  }

  private async admitGoverned(tool: string, governed: Governed, params: ToolCallParams | undefined, peer: string): Promise<KeycapToolCall> {
    const meta = isRecord(params?._meta) ? params._meta : {};
    const idempotencyKey = meta[META_IDEMPOTENCY_KEY];
    const context: AdmissionContext = {
      method: `MCP tools/call ${tool}`,
      peer,
      ...(typeof idempotencyKey === "string" ? { idempotencyKey } : {}),
    };
    const cap = await governed.sink.admit(authorizationOf(meta[META_CAPABILITY]), context);
    const unbound = bindArguments(cap, params?.arguments, this.opts.argumentLimits);
    if (unbound) {
      await governed.sink.recordRefusal(unbound, cap, context);
      throw unbound;
    }
    return callOf(tool, governed.toolId, cap);
  }

  private sinkFor(toolId: string): Sink {
    const { opts } = this;
    // A sink per tool: a capability for another governed tool is refused TOOL_NOT_ACCEPTED
    // before anything is spent, and every refusal is recorded against the tool called.
    const refusals = opts.refusals;
    const onRefusal = opts.onRefusal;
    return new Sink({
      name: opts.name,
      tools: [toolId],
      keys: opts.keys,
      ...(opts.verifier ? { verifier: opts.verifier } : {}),
      ...(opts.spentStore ? { spentStore: opts.spentStore } : {}),
      ...(opts.now ? { now: opts.now } : {}),
      ...(refusals
        ? {
            refusals: {
              record: (input) =>
                refusals.record({
                  ...input,
                  toolId,
                  // Verified means "the tool id came from a verified capability": true only when it names this tool.
                  toolIdVerified: input.toolIdVerified && input.toolId === toolId,
                  // A genuine capability is recorded one by one, not rate-limited, whatever tool it names.
                  authenticated: input.authenticated ?? input.toolIdVerified,
                }),
            },
          }
        : {}),
      ...(onRefusal ? { onRefusal: (e: SinkRefusalEvent) => onRefusal({ ...e, toolId, toolIdVerified: e.toolIdVerified && e.toolId === toolId }) } : {}),
    });
  }
}

/** The `_meta` capability as the verifier reads credentials: a bare compact JWS there, `Bearer <token>` to the verifier. */
function authorizationOf(value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  // Not a string cannot be a compact JWS: the verifier refuses it CAPABILITY_MALFORMED.
  if (typeof value !== "string") return "Bearer !";
  return value.trim() === "" ? undefined : `Bearer ${value}`;
}

function callOf(tool: string, toolId: string, cap: VerifiedCapability): KeycapToolCall {
  const idempotencyKey = cap.key ?? cap.request_id;
  return {
    tool,
    toolId,
    effect: cap.effect,
    callId: cap.call_id,
    ...(cap.key !== undefined ? { key: cap.key } : {}),
    ...(cap.request_id !== undefined ? { requestId: cap.request_id } : {}),
    ...(idempotencyKey !== undefined ? { idempotencyKey } : {}),
    capability: cap,
  };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
