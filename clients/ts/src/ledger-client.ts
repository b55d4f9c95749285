import { credentials, type ChannelCredentials } from "@grpc/grpc-js";
import { LedgerServiceClient, type LookupRequestResponse, type WriteRequest, type WriteResponse } from "../gen/keycap/ledger/v1/ledger";
import { callUnary, type CallSettings } from "./rpc";

/**
 * Low-level client of keycap.ledger.v1.LedgerService. Tools normally write
 * through a CapabilityHandle; this is for runtimes in other shapes and for
 * tests that must misbehave on purpose (writing under a key of their own).
 */
export class LedgerClient {
  readonly raw: LedgerServiceClient;

  constructor(
    readonly address: string,
    creds?: ChannelCredentials,
  ) {
    this.raw = new LedgerServiceClient(address, creds ?? credentials.createInsecure());
  }

  /** Write with an explicit capability (undefined: none at all). */
  writeWithCapability(capability: string | undefined, req: Partial<WriteRequest>, s?: CallSettings): Promise<WriteResponse> {
    const request: WriteRequest = { key: req.key ?? "", requestId: req.requestId ?? "", payload: req.payload ?? Buffer.alloc(0) };
    return callUnary(this.raw.write, this.raw, request, capability, s);
  }

  lookupWithCapability(capability: string | undefined, requestId: string, s?: CallSettings): Promise<LookupRequestResponse> {
    return callUnary(this.raw.lookupRequest, this.raw, { requestId }, capability, s);
  }

  close(): void {
    this.raw.close();
  }
}
