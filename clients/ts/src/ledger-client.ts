import { credentials, type ChannelCredentials } from "@grpc/grpc-js";
import { LedgerServiceClient, type LookupRequestResponse, type WriteRequest, type WriteResponse } from "../gen/keycap/ledger/v1/ledger";
import { batchAnswer, CALL_BATCHES, CallCoalescer } from "./call-coalescer";
import { callUnary, hasOwnSettings, type CallSettings } from "./rpc";

/** Options of {@link LedgerClient}. */
export interface LedgerClientOptions {
  /**
   * Send the writes made while one is in flight together, as one Writes (ADR 0037), each
   * still answered on its own. Default false here; a KernelClient's handles write through a
   * client with it on unless the KernelClient's `coalesce` is false. Writes given their own
   * settings (timeoutMs, signal, retry: every single-use capability's) and payloads above
   * {@link MAX_BATCHED_PAYLOAD_BYTES} are always sent alone.
   */
  coalesce?: boolean;
}

/** The largest payload a write may have to go in a batch: 32 of them stay far below the ledger's floor for a batch (1 MiB). */
export const MAX_BATCHED_PAYLOAD_BYTES = 16 * 1024;

interface CapabilityWriteItem {
  capability: string | undefined;
  write: WriteRequest;
}

/**
 * Low-level client of keycap.ledger.v1.LedgerService. Tools normally write
 * through a CapabilityHandle; this is for runtimes in other shapes and for
 * tests that must misbehave on purpose (writing under a key of their own).
 */
export class LedgerClient {
  readonly raw: LedgerServiceClient;
  private readonly writes: CallCoalescer<CapabilityWriteItem, WriteResponse> | undefined;

  constructor(
    readonly address: string,
    creds?: ChannelCredentials,
    opts: LedgerClientOptions = {},
  ) {
    this.raw = new LedgerServiceClient(address, creds ?? credentials.createInsecure());
    if (opts.coalesce === true) {
      this.writes = new CallCoalescer(
        (w) => callUnary(this.raw.write, this.raw, w.write, w.capability),
        async (items) =>
          (
            await callUnary(this.raw.writes, this.raw, { writes: items.map((w) => ({ capability: w.capability ?? "", write: w.write })) }, undefined)
          ).results.map((r) =>
            batchAnswer(
              r.result?.$case === "written" ? r.result.value : undefined,
              r.result?.$case === "errorStatus" ? r.result.value : undefined,
              "the ledger",
            ),
          ),
        CALL_BATCHES,
      );
    }
  }

  /** Write with an explicit capability (undefined: none at all). */
  writeWithCapability(capability: string | undefined, req: Partial<WriteRequest>, s?: CallSettings): Promise<WriteResponse> {
    const request: WriteRequest = { key: req.key ?? "", requestId: req.requestId ?? "", payload: req.payload ?? Buffer.alloc(0) };
    if (this.writes && !hasOwnSettings(s) && request.payload.length <= MAX_BATCHED_PAYLOAD_BYTES) return this.writes.submit({ capability, write: request });
    return callUnary(this.raw.write, this.raw, request, capability, s);
  }

  lookupWithCapability(capability: string | undefined, requestId: string, s?: CallSettings): Promise<LookupRequestResponse> {
    return callUnary(this.raw.lookupRequest, this.raw, { requestId }, capability, s);
  }

  close(): void {
    this.raw.close();
  }
}
