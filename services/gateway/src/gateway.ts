/**
 * The HTTP effect gateway (ADR 0019): an Idempotent tool's write to a third-party HTTP API
 * goes out once per kernel-derived key, carrying the key in the destination's
 * idempotency header, and every later forward of the key gets the stored answer.
 *
 * Per forward: admit the capability (the ledger's verifier, through the sink SDK), check the
 * request against the tool's registered destination, then decide by the key's record:
 * none → claim it and send; done → replay; retryable, or sending under a lease that ran out
 * (its forward crashed) → take it over and send again under the same key; sending under a
 * live lease → wait for that attempt's outcome, at most `waitMs` and never past the
 * caller's deadline, then ABORTED IN_PROGRESS. Waiting rather than refusing at once means a
 * burst of duplicates (a runtime's retries racing its first try) gets the one answer
 * without retry loops; the bound keeps a hung destination from holding callers forever.
 *
 * A capability of a shadow or replay run (ADR 0028, 0029) is checked the same way up to the
 * prepared request, then never sent: a replay is answered from the recorded run's final answer
 * under the recorded key (the replay capability's key: the kernel derives it in the recorded
 * run's context), REPLAY_NO_RECORDED_EFFECT when there is none; a shadow's would-be request is
 * recorded in the ledger's shadow store and answered `shadowed`. The sink admission refuses an
 * Unsafe one SANDBOX_UNSAFE_DENIED.
 */
import { createHash } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";
import { Code, KeycapError } from "../../common/src/errors";
import type { Logger } from "../../common/src/logger";
import type { AdmissionContext, Sink, VerifiedCapability } from "../../capability/src";
import type { SandboxMode } from "../../capability/src/claims";
import { parseBearer } from "../../common/src/bearer";
import type { ShadowRecorder } from "../../common/src/shadow-recorder";
import type { DestinationLookup } from "./destination-lookup";
import {
  checkHeaders,
  checkMethod,
  decideRedirect,
  isRetryableStatus,
  resolveForwardUrl,
  type HttpDestinationSpec,
} from "../../common/src/domain/http-destination";
import type { ForwardRecord, ForwardStore, StoredResponse } from "./forward-store";
import { SendFailure, type HttpSender } from "./http-sender";
import { Reasons, refuse } from "../../common/src/refuse";

export const FORWARD_METHOD = "/keycap.gateway.v1.GatewayService/Forward";

/** A forward as the caller sent it. */
export interface ForwardInput {
  method: string;
  path: string;
  headers: readonly { name: string; value: string }[];
  body: Buffer;
}

/** The answer, live or replayed. */
export interface ForwardOutput extends StoredResponse {
  replayed: boolean;
  key: string;
  recordedAt: Date | undefined;
  requestMismatch: boolean;
  attempts: number;
  /** The capability's run mode when not live. */
  mode?: SandboxMode;
  /** A shadow run's forward: nothing was sent, there is no answer; the would-be request is in the shadow store. */
  shadowed?: boolean;
}

export interface GatewayOptions {
  sink: Sink;
  destinations: DestinationLookup;
  store: ForwardStore;
  sender: HttpSender;
  logger: Logger;
  /** The sender's timeout: a lease lasts this long plus a margin. */
  timeoutMs: number;
  waitMs: number;
  maxRequestBytes: number;
  /** Where shadow runs' would-be requests are recorded (the ledger's shadow store). */
  shadow: ShadowRecorder;
  /** How often a forward waiting on another replica's attempt reads the key again. */
  pollMs?: number;
}

const LEASE_MARGIN_MS = 2_000;
const MAX_REDIRECTS = 5;
const MAX_ROUNDS = 8;

export class Gateway {
  /** Attempts in flight in this process, by key: local waiters await them instead of polling. */
  private readonly inFlight = new Map<string, Promise<void>>();
  private readonly pollMs: number;

  constructor(private readonly opts: GatewayOptions) {
    this.pollMs = opts.pollMs ?? 100;
  }

  async forward(authorization: string | undefined, input: ForwardInput, ctx: { peer: string; deadline?: number }): Promise<ForwardOutput> {
    const context: AdmissionContext = { method: FORWARD_METHOD, peer: ctx.peer };
    const cap = await this.opts.sink.admit(authorization, context);
    const answerRefusal = async (err: KeycapError): Promise<never> => {
      await this.opts.sink.recordRefusal(err, cap, context);
      throw err;
    };
    const key = cap.key;
    if (key === undefined) return answerRefusal(refuse(Reasons.EFFECT_CLASS_MISMATCH, "the gateway forwards Idempotent calls only"));
    const destination = await this.opts.destinations.get(cap.tool_id);
    if (!destination) {
      return answerRefusal(
        refuse(
          Reasons.TOOL_NOT_ACCEPTED,
          destination === null
            ? `tool ${cap.tool_id} has no HTTP destination: register it with http_destination to forward its writes`
            : `tool ${cap.tool_id} is not registered`,
        ),
      );
    }
    let request: PreparedRequest;
    try {
      request = this.prepare(destination, input);
    } catch (err) {
      if (err instanceof KeycapError) return answerRefusal(err);
      throw err;
    }
    if (cap.mode === "replay") return this.replayRecorded(cap, request, answerRefusal);
    if (cap.mode === "shadow") return this.shadow(authorization, cap, request);

    const deadline = Math.min(Date.now() + this.opts.waitMs, (ctx.deadline ?? Infinity) - 100);
    const claim = {
      key,
      toolId: cap.tool_id,
      callId: cap.call_id,
      principal: cap.sub,
      requestSha256: request.sha256,
      method: request.method,
      url: request.url.href,
    };
    for (let round = 0; round < MAX_ROUNDS; round++) {
      // The insert decides who sends: tried first, so a new key costs one round trip, not a read and then an insert.
      const seen = round === 0 ? undefined : await this.opts.store.get(key);
      if (!seen) {
        if (await this.opts.store.claimNew(claim, this.leaseUntil())) return this.send(cap, destination, request, 1, request.sha256, answerRefusal);
        continue;
      }
      if (seen.state === "done") return this.replay(seen, request, answerRefusal);
      if (seen.state === "retryable" || seen.leaseUntil.getTime() <= Date.now()) {
        if (await this.opts.store.takeOver(seen, this.leaseUntil())) {
          this.opts.logger.info({ key, tool: cap.tool_id, attempt: seen.attempts + 1, after: seen.state }, "gateway: sending again under the same key");
          return this.send(cap, destination, request, seen.attempts + 1, seen.requestSha256, answerRefusal);
        }
        continue;
      }
      const outcome = await this.waitFor(seen, deadline);
      if (outcome === "timeout") break;
      if (outcome.state === "done") return this.replay(outcome, request, answerRefusal);
      if (outcome.state === "retryable" && outcome.attempts === seen.attempts) {
        // The attempt this caller waited for failed: its outcome is this caller's too.
        throw refuse(Reasons.UPSTREAM_UNAVAILABLE, "the destination did not give a final answer to the attempt in flight; retry under the same key");
      }
    }
    throw refuse(
      Reasons.IN_PROGRESS,
      `a forward of this key is in flight and did not finish within ${this.opts.waitMs} ms (or the call's deadline); retry in a moment`,
    );
  }

  private prepare(destination: HttpDestinationSpec, input: ForwardInput): PreparedRequest {
    const method = checkMethod(destination, input.method);
    const url = resolveForwardUrl(destination, input.path);
    const headers = checkHeaders(destination, input.headers);
    if (input.body.length > this.opts.maxRequestBytes) {
      throw refuse(Reasons.PAYLOAD_TOO_LARGE, `the body is ${input.body.length} bytes; the gateway's limit is ${this.opts.maxRequestBytes}`, {
        field: "body",
      });
    }
    const sha256 = createHash("sha256").update(method).update("\0").update(url.href).update("\0").update(input.body).digest("hex");
    return { method, url, headers, body: input.body, sha256 };
  }

  private leaseUntil(): Date {
    return new Date(Date.now() + this.opts.timeoutMs + LEASE_MARGIN_MS);
  }

  /** Waits until the attempt `seen` ends (or its lease runs out); "timeout" past the deadline. */
  private async waitFor(seen: ForwardRecord, deadline: number): Promise<ForwardRecord | "timeout"> {
    for (;;) {
      const remaining = deadline - Date.now();
      if (remaining <= 0) return "timeout";
      const local = this.inFlight.get(seen.key);
      await Promise.race([local ?? sleep(Math.min(this.pollMs, remaining)), sleep(remaining)]);
      const now = await this.opts.store.get(seen.key);
      if (!now) return "timeout";
      if (now.attempts !== seen.attempts || now.state !== "sending") return now;
      // The attempt's forward is gone (crashed replica): back to the caller's loop to take over.
      if (now.leaseUntil.getTime() <= Date.now()) return now;
    }
  }

  /** A replay run's forward: the recorded run's final answer under the recorded key; never sent. */
  private async replayRecorded(cap: VerifiedCapability, request: PreparedRequest, answerRefusal: (err: KeycapError) => Promise<never>): Promise<ForwardOutput> {
    const recorded = await this.opts.store.get(cap.key as string);
    if (recorded?.state !== "done") {
      return answerRefusal(
        refuse(
          Reasons.REPLAY_NO_RECORDED_EFFECT,
          recorded
            ? `the recorded run's forward of this key has no final answer (${recorded.state}); a replay never sends`
            : "the recorded run never forwarded this key through the gateway; a replay never sends",
          { mode: "replay" },
        ),
      );
    }
    return { ...(await this.replay(recorded, request, answerRefusal)), mode: "replay" };
  }

  /**
   * A shadow run's forward: the request the gateway would send — method, URL and the hash the
   * live record keeps (headers and body are never stored) — goes to the ledger's shadow store
   * under the shadow key; nothing is sent.
   */
  private async shadow(authorization: string | undefined, cap: VerifiedCapability, request: PreparedRequest): Promise<ForwardOutput> {
    const key = cap.key as string;
    const token = parseBearer(authorization) ?? "";
    const wouldBe = { gateway: "http", method: request.method, url: request.url.href, request_sha256: request.sha256, body_bytes: request.body.length };
    const recorded = await this.opts.shadow.record(token, { key }, wouldBe);
    this.opts.logger.debug({ key, tool: cap.tool_id, entry: recorded.entryId }, "gateway: shadow forward recorded, not sent");
    return {
      status: 0,
      headers: [],
      body: Buffer.alloc(0),
      bodyTruncated: false,
      replayed: false,
      key,
      recordedAt: recorded.recordedAt,
      // A second shadow forward of the key with another request: the first one is kept, as live.
      requestMismatch: recorded.payloadMismatch,
      attempts: 0,
      mode: "shadow",
      shadowed: true,
    };
  }

  private async replay(record: ForwardRecord, request: PreparedRequest, answerRefusal: (err: KeycapError) => Promise<never>): Promise<ForwardOutput> {
    if (record.refusal) return answerRefusal(new KeycapError(Code.PERMISSION_DENIED, record.refusal.reason, record.refusal.message));
    if (!record.response) throw new Error(`gateway record ${record.key} is done without a response`);
    return {
      ...record.response,
      replayed: true,
      key: record.key,
      recordedAt: record.recordedAt,
      requestMismatch: record.requestSha256 !== request.sha256,
      attempts: record.attempts,
    };
  }

  private async send(
    cap: VerifiedCapability,
    destination: HttpDestinationSpec,
    request: PreparedRequest,
    attempt: number,
    claimedSha256: string,
    answerRefusal: (err: KeycapError) => Promise<never>,
  ): Promise<ForwardOutput> {
    const key = cap.key as string;
    let done!: () => void;
    this.inFlight.set(
      key,
      new Promise<void>((resolve) => {
        done = resolve;
      }),
    );
    try {
      return await this.exchange(cap, destination, request, attempt, claimedSha256, answerRefusal);
    } finally {
      this.inFlight.delete(key);
      done();
    }
  }

  private async exchange(
    cap: VerifiedCapability,
    destination: HttpDestinationSpec,
    request: PreparedRequest,
    attempt: number,
    claimedSha256: string,
    answerRefusal: (err: KeycapError) => Promise<never>,
  ): Promise<ForwardOutput> {
    const key = cap.key as string;
    const store = this.opts.store;
    const headers: [string, string][] = [...request.headers, [destination.idempotencyHeader, key]];
    let url = request.url;
    for (let hop = 0; ; hop++) {
      let answer;
      try {
        answer = await this.opts.sender.send({
          method: request.method,
          url,
          headers,
          body: request.body,
          allowPrivateNetwork: destination.allowPrivateNetwork,
        });
      } catch (err) {
        if (!(err instanceof SendFailure)) throw err;
        await store.release(key, attempt, `${err.kind}: ${err.message}`);
        if (err.kind === "address") {
          return answerRefusal(
            refuse(
              Reasons.ADDRESS_NOT_ALLOWED,
              `${url.host} resolves to a private, loopback or otherwise non-public address, which the tool's destination does not allow`,
              { host: url.host },
            ),
          );
        }
        this.opts.logger.warn(
          { key, tool: cap.tool_id, attempt, failure: err.kind, err: err.message },
          "gateway: no answer from the destination; the key stays retryable",
        );
        throw refuse(Reasons.UPSTREAM_UNAVAILABLE, `no answer from the destination (${err.kind}: ${err.message}); retry under the same key`);
      }
      if (answer.status >= 300 && answer.status < 400) {
        const decision = decideRedirect(destination, url, answer.status, firstHeader(answer.headers, "location"));
        if (decision.follow && hop < MAX_REDIRECTS) {
          url = decision.url;
          continue;
        }
        if (!decision.follow && "refusal" in decision) {
          // The destination answered: that answer is final for the key, and so is the refusal to follow it.
          await store.complete(key, attempt, { refusal: { reason: decision.refusal.reason, message: decision.refusal.message } });
          return answerRefusal(decision.refusal);
        }
      }
      if (isRetryableStatus(answer.status)) {
        await store.release(key, attempt, `status ${answer.status}`);
        throw refuse(Reasons.UPSTREAM_UNAVAILABLE, `the destination answered ${answer.status}; retry under the same key`, {
          upstream_status: String(answer.status),
        });
      }
      const response: StoredResponse = {
        status: answer.status,
        headers: keptHeaders(answer.headers, destination.responseHeaders),
        body: answer.body,
        bodyTruncated: answer.bodyTruncated,
      };
      const recordedAt = await store.complete(key, attempt, { response });
      return { ...response, replayed: false, key, recordedAt, requestMismatch: claimedSha256 !== request.sha256, attempts: attempt };
    }
  }
}

interface PreparedRequest {
  method: string;
  url: URL;
  headers: [string, string][];
  body: Buffer;
  sha256: string;
}

function firstHeader(headers: IncomingHttpHeaders, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function keptHeaders(headers: IncomingHttpHeaders, keep: readonly string[]): [string, string][] {
  const out: [string, string][] = [];
  for (const name of keep) {
    const v = headers[name];
    if (v === undefined) continue;
    for (const value of Array.isArray(v) ? v : [v]) out.push([name, value]);
  }
  return out;
}

/** A timer that does not keep a stopping process alive. */
function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
