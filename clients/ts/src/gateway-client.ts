import { credentials, type ChannelCredentials } from "@grpc/grpc-js";
import { GatewayServiceClient, type ForwardResponse } from "../gen/keycap/gateway/v1/gateway";
import { callUnary, type CallSettings } from "./rpc";

/** An HTTP request for the tool's registered destination (ADR 0019). */
export interface ForwardSpec {
  /** One of the destination's methods; default "POST". */
  method?: string;
  /** Relative to the destination's base URL, e.g. "charges" or "charges?expand=customer". */
  path: string;
  /** Sent as given and never stored (an API secret belongs here); the gateway sets the idempotency header. */
  headers?: Record<string, string>;
  /** The body: a string is sent as UTF-8. */
  body?: string | Uint8Array;
}

/**
 * Client of keycap.gateway.v1.GatewayService: sends an Idempotent tool's write to its
 * registered HTTP destination under the call's capability. A retryable failure of the
 * destination (UNAVAILABLE) is retried within the deadline under the same key, which the
 * destination's idempotency header makes safe.
 */
export class GatewayClient {
  readonly raw: GatewayServiceClient;

  constructor(
    readonly address: string,
    creds?: ChannelCredentials,
  ) {
    this.raw = new GatewayServiceClient(address, creds ?? credentials.createInsecure());
  }

  forward(capability: string, spec: ForwardSpec, s?: CallSettings): Promise<ForwardResponse> {
    const body = typeof spec.body === "string" ? Buffer.from(spec.body, "utf8") : Buffer.from(spec.body ?? new Uint8Array());
    const headers = Object.entries(spec.headers ?? {}).map(([name, value]) => ({ name, value }));
    return callUnary(this.raw.forward, this.raw, { method: spec.method ?? "POST", path: spec.path, headers, body }, capability, s);
  }

  close(): void {
    this.raw.close();
  }
}
