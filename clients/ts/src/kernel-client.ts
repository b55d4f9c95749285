import { randomUUID } from "node:crypto";
import { status, type ChannelCredentials } from "@grpc/grpc-js";
import {
  CallOutcome,
  KernelServiceClient,
  RunMode,
  type BeginCallRequest,
  type BeginCallResponse,
  type Call,
  type CompleteCallRequest,
  type CompleteCallResponse,
  type GetCallResponse,
  type ListPendingCallsResponse,
  type RegisterToolResponse,
  type ResumeCallResponse,
  type RunCall,
  type SearchCallsResponse,
  type Tool,
} from "../gen/keycap/kernel/v1/kernel";
import type { ToolValid } from "../gen/keycap/kernel/v1/kernel.valid";
import type { CompletionReceipt } from "../gen/keycap/effect/v1/effect";
import { batchAnswer, CALL_BATCHES, CallCoalescer } from "./call-coalescer";
import { CapabilityHandle } from "./capability-handle";
import { KeycapClientError } from "./errors";
import { channelCredentials, runtimeTokenFromEnv, type TlsOptions } from "./credentials";
import { LedgerClient } from "./ledger-client";
import { callUnary, collectPages, hasOwnSettings, type CallSettings } from "./rpc";
import { toolToProto, type ToolDefinition } from "./tool-definition";

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

export interface KernelClientOptions {
  /**
   * The principal's bearer secret, sent as `authorization: Bearer <token>` on
   * every kernel call. Default: the runtime credential by the standard lookup
   * (KEYCAP_RUNTIME_TOKEN, KEYCAP_RUNTIME_TOKEN_FILE, `$KEYCAP_DATA_DIR/runtime-token`).
   * Pass "" to send none (a principal proven by its TLS client certificate).
   */
  token?: string;
  /** TLS for the kernel and ledger channels; default plaintext (loopback only). */
  tls?: TlsOptions;
  /** Channel credentials, overriding `tls` (full control). */
  credentials?: ChannelCredentials;
  /** Ledger address handles write to; needed for begin()/resume() handles. */
  ledgerAddress?: string;
  /**
   * Send the begins and completes made while one is in flight together, as one
   * BeginCalls / CompleteCalls (ADR 0022), each still answered on its own. Default true;
   * calls given their own settings (timeoutMs, signal, retry) are always sent alone.
   */
  coalesce?: boolean;
}

/** Options of {@link KernelClient.begin}. */
export interface BeginOptions extends CallSettings {
  /** Call id (default: a fresh UUID chosen by this client): beginning it again with the same arguments returns the same call. */
  callId?: string;
  /** The agent run this call belongs to (enters the key when the tool's derivation names run_id). */
  runId?: string;
  /**
   * The run mode (ADR 0028, docs/run-modes.md); default "live". "replay" needs `replayOf` and a
   * `runId` of its own; "shadow" may name the live run it shadows in `shadows`.
   */
  mode?: RunModeOption;
  /** mode "replay": the recorded run replayed (its keys are derived in that run's context). */
  replayOf?: string;
  /** mode "shadow": the live run this shadow run runs beside, for listing them side by side. */
  shadows?: string;
}

/** A run mode by name. */
export type RunModeOption = "live" | "shadow" | "replay";

const RUN_MODES: Record<RunModeOption, RunMode> = {
  live: RunMode.RUN_MODE_LIVE,
  shadow: RunMode.RUN_MODE_SHADOW,
  replay: RunMode.RUN_MODE_REPLAY,
};

/**
 * Completion receipts held for the next BeginCalls (ADR 0035), at most the kernel's limit per
 * request; beyond, the oldest are dropped: a dropped receipt costs the kernel a read, never a
 * call (it then reads the entry, as it does for a client that forwards none).
 */
const MAX_RECEIPTS = 1024;

/**
 * Typed client of keycap.kernel.v1.KernelService. Every error is a
 * KeycapClientError carrying the gRPC code and the ErrorInfo reason.
 */
export class KernelClient {
  readonly raw: KernelServiceClient;
  private readonly ledger: LedgerClient | undefined;
  private readonly token: string | undefined;
  private readonly begins: CallCoalescer<BeginCallRequest, BeginCallResponse> | undefined;
  private readonly completes: CallCoalescer<CompleteCallRequest, CompleteCallResponse> | undefined;
  /** Receipts of writes whose entries completed their calls, for the next BeginCalls. */
  private receipts: CompletionReceipt[] = [];

  constructor(
    readonly address: string,
    opts: KernelClientOptions = {},
  ) {
    const creds = opts.credentials ?? channelCredentials(opts.tls);
    this.raw = new KernelServiceClient(address, creds);
    this.ledger = opts.ledgerAddress ? new LedgerClient(opts.ledgerAddress, creds, { coalesce: opts.coalesce !== false }) : undefined;
    const token = opts.token ?? runtimeTokenFromEnv();
    this.token = token === "" ? undefined : token;
    if (opts.coalesce !== false) {
      this.begins = new CallCoalescer(
        (req) => callUnary(this.raw.beginCall, this.raw, req, this.token),
        async (calls) =>
          (await callUnary(this.raw.beginCalls, this.raw, { calls, receipts: this.takeReceipts() }, this.token)).results.map((r) =>
            batchAnswer(r.result?.$case === "begun" ? r.result.value : undefined, r.result?.$case === "errorStatus" ? r.result.value : undefined, "the kernel"),
          ),
        CALL_BATCHES,
      );
      this.completes = new CallCoalescer(
        (req) => callUnary(this.raw.completeCall, this.raw, req, this.token),
        async (calls) =>
          (await callUnary(this.raw.completeCalls, this.raw, { calls }, this.token)).results.map((r) =>
            batchAnswer(
              r.result?.$case === "completed" ? r.result.value : undefined,
              r.result?.$case === "errorStatus" ? r.result.value : undefined,
              "the kernel",
            ),
          ),
        CALL_BATCHES,
      );
    }
  }

  /** Registers a tool; the same definition again is a no-op. A definition the kernel would refuse for its shape is refused here, before sending. */
  async registerTool(def: ToolDefinition, s?: CallSettings): Promise<RegisterToolResponse> {
    return callUnary(this.raw.registerTool, this.raw, { tool: toolToProto(def) }, this.token, s);
  }

  /**
   * Registers a tool from its wire form (for tools declared in another language).
   * Takes the generated Valid type: a key-less Idempotent, empty key fields or an
   * unset effect class do not compile (the proto's rules, ADR 0010).
   */
  registerToolProto(tool: ToolValid, s?: CallSettings): Promise<RegisterToolResponse> {
    return callUnary(this.raw.registerTool, this.raw, { tool }, this.token, s);
  }

  async getTool(toolId: string, s?: CallSettings): Promise<Tool | undefined> {
    return (await callUnary(this.raw.getTool, this.raw, { toolId }, this.token, s)).tool;
  }

  listTools(s?: CallSettings): Promise<Tool[]> {
    return collectPages(async (pageToken) => {
      const res = await callUnary(this.raw.listTools, this.raw, { pageSize: 1000, pageToken }, this.token, s);
      return { items: res.tools, nextPageToken: res.nextPageToken };
    });
  }

  /** BeginCall in its wire form. */
  beginCall(toolId: string, argumentsJson: string, opts: BeginOptions = {}): Promise<BeginCallResponse> {
    // A lone surrogate cannot be sent as UTF-8: the encoder would silently replace it
    // with U+FFFD, so two different arguments would reach the kernel as one.
    for (const [field, text] of [
      ["arguments_json", argumentsJson],
      ["run_id", opts.runId ?? ""],
    ] as const) {
      if (LONE_SURROGATE.test(text)) {
        return Promise.reject(
          new KeycapClientError(status.INVALID_ARGUMENT, "INVALID_UTF8", `${field} holds a lone surrogate, which is not text UTF-8 can carry (not sent)`, {
            field,
          }),
        );
      }
    }
    // The call id is chosen here when not given, so a BeginCall retried after a lost
    // answer finds its call instead of beginning a second one.
    const req: BeginCallRequest = {
      toolId,
      argumentsJson,
      callId: opts.callId || randomUUID(),
      runId: opts.runId ?? "",
      mode: RUN_MODES[opts.mode ?? "live"],
      replayOfRunId: opts.replayOf ?? "",
      shadowsRunId: opts.shadows ?? "",
    };
    if (this.begins && !hasOwnSettings(opts)) return this.begins.submit(req);
    return callUnary(this.raw.beginCall, this.raw, req, this.token, opts);
  }

  /**
   * Begins a call and returns a capability handle whose write() always sends
   * the kernel's key and capability. `args` is an object (serialised here) or
   * JSON text sent exactly as given.
   */
  async begin(toolId: string, args: object | string, opts: BeginOptions = {}): Promise<CapabilityHandle> {
    const res = await this.beginCall(toolId, typeof args === "string" ? args : JSON.stringify(args), opts);
    return this.handleFor(res.call, res.capability, res.capabilityExpiresAt);
  }

  completeCall(callId: string, outcome: "succeeded" | "failed", detail = "", s?: CallSettings): Promise<CompleteCallResponse> {
    const req: CompleteCallRequest = {
      callId,
      outcome: outcome === "succeeded" ? CallOutcome.CALL_OUTCOME_SUCCEEDED : CallOutcome.CALL_OUTCOME_FAILED,
      outcomeDetail: detail,
    };
    if (this.completes && !hasOwnSettings(s)) return this.completes.submit(req);
    return callUnary(this.raw.completeCall, this.raw, req, this.token, s);
  }

  listPendingCallsPage(toolId = "", pageToken = "", pageSize = 100, s?: CallSettings): Promise<ListPendingCallsResponse> {
    return callUnary(this.raw.listPendingCalls, this.raw, { toolId, pageSize, pageToken }, this.token, s);
  }

  /** Every pending call (of one tool, or all). */
  listPendingCalls(toolId = "", s?: CallSettings): Promise<Call[]> {
    return collectPages(async (pageToken) => {
      const res = await this.listPendingCallsPage(toolId, pageToken, 1000, s);
      return { items: res.calls, nextPageToken: res.nextPageToken };
    });
  }

  /** Every call recovery marked indeterminate and nobody has settled yet (of one tool, or all). */
  listIndeterminateCalls(toolId = "", s?: CallSettings): Promise<Call[]> {
    return collectPages(async (pageToken) => {
      const res = await callUnary(this.raw.listIndeterminateCalls, this.raw, { toolId, pageSize: 1000, pageToken }, this.token, s);
      return { items: res.calls, nextPageToken: res.nextPageToken };
    });
  }

  /**
   * One call with who settled it and its current capability's claims (ADR 0032); undefined
   * when the journal has no such call. Operators read any call; a runtime, calls of tools it owns or is granted.
   */
  async getCall(callId: string, s?: CallSettings): Promise<GetCallResponse | undefined> {
    try {
      return await callUnary(this.raw.getCall, this.raw, { callId }, this.token, s);
    } catch (err) {
      if (KeycapClientError.from(err).reason === "CALL_NOT_FOUND") return undefined;
      throw err;
    }
  }

  /** One page of the calls found by one field (call id, run id, key or principal), newest first. */
  searchCallsPage(
    by: { callId: string } | { runId: string } | { key: string } | { principal: string },
    pageToken = "",
    pageSize = 100,
    s?: CallSettings,
  ): Promise<SearchCallsResponse> {
    const [field, value] = Object.entries(by)[0] as ["callId" | "runId" | "key" | "principal", string];
    return callUnary(this.raw.searchCalls, this.raw, { criterion: { $case: field, value }, pageSize, pageToken }, this.token, s);
  }

  /** One run's calls in the order they were begun, each with its position (ADR 0028). */
  listRunCalls(runId: string, s?: CallSettings): Promise<RunCall[]> {
    return collectPages(async (pageToken) => {
      const res = await callUnary(this.raw.listRunCalls, this.raw, { runId, pageSize: 1000, pageToken }, this.token, s);
      return { items: res.calls, nextPageToken: res.nextPageToken };
    });
  }

  /**
   * The recovery path (DESIGN §5). `lookupOnly`: issue nothing, only settle a Queryable
   * call the ledger already holds (RESUME_ACTION_LEFT_PENDING otherwise, attempt unchanged).
   */
  resumeCall(callId: string, s?: CallSettings, opts: { lookupOnly?: boolean } = {}): Promise<ResumeCallResponse> {
    return callUnary(this.raw.resumeCall, this.raw, { callId, lookupOnly: opts.lookupOnly === true }, this.token, s);
  }

  /** The kernel's public JWKS (JSON text). */
  async signingKeys(s?: CallSettings): Promise<{ jwksJson: string; currentKeyId: string }> {
    return callUnary(this.raw.getSigningKeys, this.raw, {}, this.token, s);
  }

  /**
   * Keeps the ledger's completion receipt of a write (ADR 0035) for the next BeginCalls, so the
   * kernel settles that call without reading its entry. The handles call it; a receipt is
   * only sent when calls are batched (coalescing on), one at a time there is nothing to ride on.
   */
  forwardReceipt(receipt: CompletionReceipt): void {
    if (!this.begins) return;
    this.receipts.push(receipt);
    if (this.receipts.length > MAX_RECEIPTS) this.receipts.splice(0, this.receipts.length - MAX_RECEIPTS);
  }

  private takeReceipts(): CompletionReceipt[] {
    const taken = this.receipts;
    this.receipts = [];
    return taken;
  }

  /** A handle for a call and capability (after begin or a RETRY resume). */
  handleFor(call: Call | undefined, capability: string, expiresAt: Date | undefined): CapabilityHandle {
    if (!call) throw new Error("kernel answered without a call");
    return new CapabilityHandle(call, capability, expiresAt, this.ledger, this);
  }

  close(): void {
    this.raw.close();
    this.ledger?.close();
  }
}
