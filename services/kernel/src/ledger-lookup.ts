import { credentials, Metadata, type ChannelCredentials, type ServiceError } from "@grpc/grpc-js";
import { LedgerServiceClient } from "../../../gen/ts/keycap/ledger/v1/ledger";
import { formatHostPort, type HostPort } from "../../common/src/config";
import { Reasons, refuse } from "../../common/src/refuse";

/** Asks the ledger whether a Queryable request took effect. */
export interface LedgerLookup {
  lookup(requestId: string, capability: string): Promise<{ found: boolean; entryId: string }>;
}

/**
 * LedgerLookup over gRPC. The address is read at call time, so a kernel and a
 * ledger started in one process (port 0) can find each other.
 */
export class GrpcLedgerLookup implements LedgerLookup {
  private client: LedgerServiceClient | undefined;
  private clientAddress = "";

  constructor(
    private readonly address: () => HostPort,
    /** TLS pinned to the ledger's CA outside loopback (services/common/src/tls.ts). */
    private readonly channelCredentials: () => ChannelCredentials = () => credentials.createInsecure(),
    private readonly timeoutMs = 5000,
  ) {}

  async lookup(requestId: string, capability: string): Promise<{ found: boolean; entryId: string }> {
    const address = formatHostPort(this.address());
    if (!this.client || this.clientAddress !== address) {
      this.client?.close();
      this.client = new LedgerServiceClient(address, this.channelCredentials());
      this.clientAddress = address;
    }
    const client = this.client;
    const md = new Metadata();
    md.set("authorization", `Bearer ${capability}`);
    return new Promise((resolve, reject) => {
      client.lookupRequest({ requestId }, md, { deadline: Date.now() + this.timeoutMs }, (err: ServiceError | null, res) => {
        if (err) {
          reject(
            refuse(
              Reasons.LEDGER_UNAVAILABLE,
              `cannot ask the ledger at ${address} whether request ${requestId} took effect (${err.details || err.message}); retry later`,
              { ledger: address },
            ),
          );
          return;
        }
        resolve({ found: res.found, entryId: res.entry?.entryId ?? "" });
      });
    });
  }

  close(): void {
    this.client?.close();
  }
}
