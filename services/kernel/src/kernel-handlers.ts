/**
 * The gRPC edge of the kernel: every RPC authenticates its caller first, and every
 * refusal (authentication, authorisation or bad input) is stored in the refusal store
 * before it is answered, attributed to the tool id and the principal when known
 * (DESIGN §9). Unauthenticated callers' records are rate-limited per peer by the store.
 */
import { status, type Metadata, type ServerUnaryCall, type sendUnaryData } from "@grpc/grpc-js";
import type { PeerCertificate } from "node:tls";
import { KeycapError } from "../../common/src/errors";
import { unaryHandler } from "../../common/src/grpc-status";
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
        caller = await edge.auth.authenticate({
          authorization: authorizationValues(call.metadata),
          peerCertificate: peerCertificate(call as ServerUnaryCall<unknown, unknown>),
        });
        return fn(req, caller);
      },
      {
        logRefusals: true,
        onRefusal: (err: KeycapError, peer: string) =>
          edge.audit.record({
            method,
            reason: err.reason,
            code: status[err.code] ?? String(err.code),
            toolId: err.metadata["tool_id"] ?? field(call.request, "toolId"),
            toolIdVerified: false,
            authenticated: caller !== undefined,
            callId: err.metadata["call_id"] ?? field(call.request, "callId"),
            peer,
            message: err.message,
            ...(caller ? { principal: caller.name } : {}),
          }),
      },
    );
    run(call, callback);
  };
}
