/** The grpc-js binding of LedgerService: the caller's credential and peer from the call, results mapped to the wire. */
import { status, type Metadata, type ServerUnaryCall } from "@grpc/grpc-js";
import type {
  LedgerServiceServer,
  LookupRequestRequest,
  LookupRequestResponse,
  WriteRequest,
  WriteResponse,
  WriteResult,
  WritesRequest,
  WritesResponse,
} from "../../../gen/ts/keycap/ledger/v1/ledger";
import { encodedStatus, settleFailure, unaryHandler } from "../../common/src/grpc-status";
import type { Logger } from "../../common/src/logger";
import type { RejectionAudit } from "../../common/src/rejection-audit";
import type { CallContext, Ledger, WriteOutcome } from "./ledger";
import { entryToProto } from "./ledger-proto";

export function ledgerServiceImpl(ledger: Ledger, logger: Logger, audit: Pick<RejectionAudit, "record">): LedgerServiceServer {
  return {
    write: unaryHandler(logger, "Write", async (req: WriteRequest, call: ServerUnaryCall<WriteRequest, WriteResponse>) =>
      writeResponse(await ledger.write(req, callContext(call))),
    ),
    writes: unaryHandler(
      logger,
      "Writes",
      async (req: WritesRequest, call: ServerUnaryCall<WritesRequest, WritesResponse>) => {
        const peer = call.getPeer();
        // Each item is a Write of its own: verified, decided, recorded and refused alone.
        const results = await Promise.all(
          req.writes.map(async (w): Promise<WriteResult> => {
            const ctx: CallContext = { authorization: w.capability === "" ? [] : [`Bearer ${w.capability}`], peer };
            try {
              const write = w.write ?? { key: "", requestId: "", payload: Buffer.alloc(0) };
              return { result: { $case: "written", value: writeResponse(await ledger.write(write, ctx)) } };
            } catch (err) {
              return { result: { $case: "errorStatus", value: encodedStatus(await settleFailure(logger, "Write", err, peer)) } };
            }
          }),
        );
        return { results };
      },
      {
        // A batch refused whole (empty, too large, undecodable) is recorded like any refusal.
        onRefusal: (err, peer) =>
          audit.record({ method: "Writes", reason: err.reason, code: status[err.code] ?? String(err.code), toolIdVerified: false, peer, message: err.message }),
      },
    ),
    lookupRequest: unaryHandler(
      logger,
      "LookupRequest",
      async (req: LookupRequestRequest, call: ServerUnaryCall<LookupRequestRequest, LookupRequestResponse>) => {
        const entry = await ledger.lookupRequest(req, callContext(call));
        return entry ? { found: true, entry: entryToProto(entry) } : { found: false, entry: undefined };
      },
    ),
  };
}

function writeResponse(out: WriteOutcome): WriteResponse {
  const { entry, duplicate, payloadMismatch, replayed, shadow, completesCall, completionReceipt } = out;
  return {
    entry: entryToProto(entry),
    duplicate,
    payloadMismatch,
    replayed: replayed === true,
    shadow: shadow === true,
    completesCall: completesCall === true,
    completionReceipt: completionReceipt && { ...completionReceipt, mac: Buffer.from(completionReceipt.mac) },
  };
}

function callContext(call: { metadata: Metadata; getPeer(): string }): CallContext {
  return {
    authorization: call.metadata.get("authorization").map((v) => (typeof v === "string" ? v : v.toString("latin1"))),
    peer: call.getPeer(),
  };
}
