/** The grpc-js binding of LedgerService: the caller's credential and peer from the call, results mapped to the wire. */
import type { Metadata, ServerUnaryCall } from "@grpc/grpc-js";
import type { LedgerServiceServer, LookupRequestRequest, LookupRequestResponse, WriteRequest, WriteResponse } from "../../../gen/ts/keycap/ledger/v1/ledger";
import { unaryHandler } from "../../common/src/grpc-status";
import type { Logger } from "../../common/src/logger";
import type { CallContext, Ledger } from "./ledger";
import { entryToProto } from "./ledger-proto";

export function ledgerServiceImpl(ledger: Ledger, logger: Logger): LedgerServiceServer {
  return {
    write: unaryHandler(logger, "Write", async (req: WriteRequest, call: ServerUnaryCall<WriteRequest, WriteResponse>) => {
      const { entry, duplicate, payloadMismatch, replayed, shadow, completesCall, completionReceipt } = await ledger.write(req, callContext(call));
      return {
        entry: entryToProto(entry),
        duplicate,
        payloadMismatch,
        replayed: replayed === true,
        shadow: shadow === true,
        completesCall: completesCall === true,
        completionReceipt: completionReceipt && { ...completionReceipt, mac: Buffer.from(completionReceipt.mac) },
      };
    }),
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

function callContext(call: { metadata: Metadata; getPeer(): string }): CallContext {
  return {
    authorization: call.metadata.get("authorization").map((v) => (typeof v === "string" ? v : v.toString("latin1"))),
    peer: call.getPeer(),
  };
}
