/**
 * Fetches the kernel's public JWKS over gRPC (KernelService.GetSigningKeys), for
 * RemoteJwksSource. The address is read at every fetch, so a ledger can start before the
 * kernel, and a kernel started in the same process on port 0 is found once it is bound.
 */
import { credentials, Metadata, type ChannelCredentials, type ServiceError } from "@grpc/grpc-js";
import { KernelServiceClient } from "../../../../gen/ts/keycap/kernel/v1/kernel";
import { formatHostPort, type HostPort } from "../../../common/src/config";

/**
 * One gRPC client to the kernel, remade when the address changes; its `fetch` is what a
 * RemoteJwksSource is given.
 *
 * @example
 * const fetcher = new KernelJwksFetcher(() => config.kernelAddress, () => peerChannelCredentials(config.tls));
 * const source = new RemoteJwksSource(() => fetcher.fetch());
 */
export class KernelJwksFetcher {
  private client: KernelServiceClient | undefined;
  private clientAddress = "";

  constructor(
    private readonly address: () => HostPort,
    /** TLS with the kernel's CA pinned, so only the real kernel can hand out keys (DESIGN §9). */
    private readonly channelCredentials: () => ChannelCredentials = () => credentials.createInsecure(),
    private readonly timeoutMs = 3000,
  ) {}

  /** The JWKS JSON text; rejects when the kernel cannot be reached in time. */
  fetch(): Promise<string> {
    const address = formatHostPort(this.address());
    if (!this.client || this.clientAddress !== address) {
      this.client?.close();
      // Reconnect quickly: the default backoff (up to 2 min) kept a ledger started before its
      // kernel refusing writes long after the kernel was up.
      this.client = new KernelServiceClient(address, this.channelCredentials(), {
        "grpc.initial_reconnect_backoff_ms": 200,
        "grpc.max_reconnect_backoff_ms": 1000,
      });
      this.clientAddress = address;
    }
    const client = this.client;
    return new Promise((resolve, reject) => {
      client.getSigningKeys({}, new Metadata(), { deadline: Date.now() + this.timeoutMs }, (err: ServiceError | null, res) => {
        if (!err) return resolve(res.jwksJson);
        // A failed channel answers from its last failure until its reconnect backoff runs
        // out, which kept refusing writes for a while after the kernel came up: the next
        // fetch dials afresh instead, so the kernel's first answer is the one it gets.
        if (this.client === client) this.close();
        reject(new Error(`GetSigningKeys at ${address}: ${describe(err)}`));
      });
    });
  }

  /** Closes the client; a later `fetch` opens a new one. */
  close(): void {
    this.client?.close();
    this.client = undefined;
  }
}

/** grpc-js's message without its empty trailing "Resolution note:" and doubled code. */
function describe(err: ServiceError): string {
  return (err.details || err.message).replace(/\s*Resolution note:\s*$/, "").trim();
}
