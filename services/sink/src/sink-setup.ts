/**
 * The pieces a sink is usually built from, wired the way the ledger wires its own: the
 * kernel's keys over gRPC (cached, refetched once per cooldown for an unknown kid, retried
 * in the background while the kernel is down), and keycap's refusal store.
 */
import { credentials, type ChannelCredentials } from "@grpc/grpc-js";
import type { KeyObject } from "node:crypto";
import type { Db } from "mongodb";
import { parseHostPort } from "../../common/src/config";
import type { Logger } from "../../common/src/logger";
import { RejectionAudit } from "../../common/src/rejection-audit";
import { sinkService } from "../../common/src/sink-name";
import { KernelJwksFetcher } from "../../capability/src";
import type { PublicKeySource } from "../../capability/src";
import { RemoteJwksSource, type RemoteJwksSourceOptions } from "../../capability/src";

/** The kernel's public keys over gRPC, as the ledger gets them. */
export class KernelKeySource implements PublicKeySource {
  private readonly fetcher: KernelJwksFetcher;
  private readonly source: RemoteJwksSource;

  /**
   * @param address the kernel, "host:port"
   * @example const keys = new KernelKeySource("127.0.0.1:50051");
   */
  constructor(address: string, opts: RemoteJwksSourceOptions & { channelCredentials?: ChannelCredentials } = {}) {
    const hostPort = parseHostPort("kernel address", address);
    const { channelCredentials = credentials.createInsecure(), ...sourceOpts } = opts;
    this.fetcher = new KernelJwksFetcher(
      () => hostPort,
      () => channelCredentials,
    );
    this.source = new RemoteJwksSource(() => this.fetcher.fetch(), { retryInitialMs: 100, retryMaxMs: 500, ...sourceOpts });
  }

  getKey(kid: string): Promise<KeyObject | undefined> {
    return this.source.getKey(kid);
  }

  close(): void {
    this.source.close();
    this.fetcher.close();
  }
}

/**
 * keycap's refusal store (the `rejections` collection of keycap's database), recording as
 * `sink:<name>`: `keycap rejections --service sink:<name>` lists them.
 */
export function openSinkRefusalStore(db: Db, name: string, logger: Logger, unauthenticatedPerMinute = 60): Promise<RejectionAudit> {
  return RejectionAudit.open(db, { service: sinkService(name), unauthenticatedPerMinute, logger });
}
