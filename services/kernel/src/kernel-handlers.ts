/**
 * The gRPC edge of the kernel: every RPC authenticates its caller first, and every
 * refusal (authentication, authorisation or bad input) is stored in the refusal store
 * before it is answered, attributed to the tool id and the principal when known
 * (DESIGN §9). Unauthenticated callers' records are rate-limited per peer by the store.
 */
import { status, type Metadata, type ServerUnaryCall, type sendUnaryData } from "@grpc/grpc-js";
import type { PeerCertificate } from "node:tls";
import { KeycapError } from "../../common/src/errors";
import { encodedStatus, settleFailure, unaryHandler } from "../../common/src/grpc-status";
import type { Logger } from "../../common/src/logger";
import type { RejectionAudit } from "../../common/src/rejection-audit";
import type { Caller, CallerAuthenticator } from "./caller-auth";

export interface KernelEdge {
  auth: CallerAuthenticator;
  audit: RejectionAudit;
  logger: Logger;
}

type Handler<Req, Res> = (call: ServerUnaryCall<Req, Res>, callback: sendUnaryData<Res>) => void;

function authorizationValues(md: Metadata): string[] {
  return md.get("authorization").map((v) => (typeof v === "string" ? v : v.toString("latin1")));
}

function peerCertificate(call: ServerUnaryCall<unknown, unknown>): PeerCertificate | undefined {
  // grpc-js reports a certificate only when the TLS layer verified it against the client CA.
  return call.getAuthContext().sslPeerCertificate;
}

function field(req: unknown, name: string): string {
  const v = (req as Record<string, unknown> | null)?.[name];
  return typeof v === "string" ? v : "";
}

/**
 * Wraps `fn` as an authenticated kernel handler. `anonymous` handlers (GetSigningKeys)
 * skip authentication; their refusals are still recorded.
 */
export function kernelHandler<Req, Res>(
  edge: KernelEdge,
  method: string,
  fn: (req: Req, caller: Caller) => Promise<Res>,
  opts: { anonymous?: boolean } = {},
): Handler<Req, Res> {
  return (call, callback) => {
    let caller: Caller | undefined;
    const run = unaryHandler<Req, Res>(
      edge.logger,
      method,
      async (req) => {
        if (opts.anonymous) return fn(req, { name: "", role: "runtime", method: "bearer" });
        caller = await authenticate(edge, call);
        return fn(req, caller);
      },
      { logRefusals: true, onRefusal: (err, peer) => recordRefusal(edge, method, err, peer, call.request, caller) },
    );
    run(call, callback);
  };
}

/** One item's answer in a batch response: what the unary RPC would have answered. */
export type ItemResult<Res> = { $case: "ok"; value: Res } | { $case: "error"; status: Buffer };

/**
 * Wraps `fn` (the unary RPC `itemMethod` for one item) as an authenticated batch handler
 * (ADR 0022): the caller is authenticated once for the batch; each item then runs
 * exactly as the unary RPC would — the item message's rules from proto/ (`checkItem`, which
 * the unary RPC's decoding runs), its own authorisation, validation and refusal record
 * (under `itemMethod`, with that item's tool and call ids) — concurrently, and is
 * answered on its own. Only what all items share refuses the batch: authentication and
 * the batch's own rules (size, decoding).
 */
export function kernelBatchHandler<Req extends { calls: Item[] }, Res, Item, ItemRes>(
  edge: KernelEdge,
  method: string,
  item: { method: string; check: (item: Item) => KeycapError | undefined },
  fn: (item: Item, caller: Caller) => Promise<ItemRes>,
  toResponse: (results: ItemResult<ItemRes>[]) => Res,
  /** What the request carries besides its items, taken once the caller is authenticated. */
  onRequest?: (req: Req, caller: Caller) => void,
): Handler<Req, Res> {
  const itemMethod = item.method;
  return (call, callback) => {
    let caller: Caller | undefined;
    const run = unaryHandler<Req, Res>(
      edge.logger,
      method,
      async (req) => {
        const who = await authenticate(edge, call);
        caller = who;
        onRequest?.(req, who);
        const peer = call.getPeer();
        const results = await Promise.all(
          req.calls.map(async (one): Promise<ItemResult<ItemRes>> => {
            try {
              const broken = item.check(one);
              if (broken) throw broken;
              return { $case: "ok", value: await fn(one, who) };
            } catch (err) {
              const answer = await settleFailure(edge.logger, itemMethod, err, peer, {
                logRefusals: true,
                onRefusal: (e, p) => recordRefusal(edge, itemMethod, e, p, one, who),
              });
              return { $case: "error", status: encodedStatus(answer) };
            }
          }),
        );
        return toResponse(results);
      },
      { logRefusals: true, onRefusal: (err, peer) => recordRefusal(edge, method, err, peer, call.request, caller) },
    );
    run(call, callback);
  };
}

function authenticate(edge: KernelEdge, call: ServerUnaryCall<unknown, unknown>): Promise<Caller> {
  return edge.auth.authenticate({ authorization: authorizationValues(call.metadata), peerCertificate: peerCertificate(call) });
}

function recordRefusal(edge: KernelEdge, method: string, err: KeycapError, peer: string, request: unknown, caller: Caller | undefined): Promise<void> {
  return edge.audit.record({
    method,
    reason: err.reason,
    code: status[err.code] ?? String(err.code),
    toolId: err.metadata["tool_id"] ?? field(request, "toolId"),
    toolIdVerified: false,
    authenticated: caller !== undefined,
    callId: err.metadata["call_id"] ?? field(request, "callId"),
    peer,
    message: err.message,
    ...(caller ? { principal: caller.name } : {}),
  });
}
