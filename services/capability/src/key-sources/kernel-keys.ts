/**
 * The kernel's public keys as a verifying service (the ledger, the gateway) gets them:
 * KEYCAP_JWKS_FILE when set, else the kernel's GetSigningKeys over a channel that must be
 * authenticated off loopback (whoever answers there would choose the keys it trusts).
 */
import { ConfigError, type KeycapConfig } from "../../../common/src/config";
import type { Logger } from "../../../common/src/logger";
import { peerChannelCredentials } from "../../../common/src/tls";
import { isLoopback } from "../../../common/src/tls-config";
import { FileJwksSource } from "./file-jwks-source";
import { JwksError } from "./jwks";
import { KernelJwksFetcher } from "./kernel-jwks-fetcher";
import type { PublicKeySource } from "./public-key-source";
import { RemoteJwksSource } from "./remote-jwks-source";

/** A key source and how to stop its background fetching. */
export interface KernelKeys {
  source: PublicKeySource;
  close(): void;
}

/** @throws ConfigError naming KEYCAP_KERNEL_ADDRESS or KEYCAP_JWKS_FILE */
export async function openKernelKeys(config: KeycapConfig, logger: Logger): Promise<KernelKeys> {
  if (config.jwksFile === undefined && config.tls.peerCaFile === undefined && !isLoopback(config.kernelAddress.host)) {
    // Whoever answers on that address would choose the keys the service trusts; no override.
    throw new ConfigError(
      "KEYCAP_KERNEL_ADDRESS",
      `${config.kernelAddress.host} is not loopback: set KEYCAP_TLS_CA_FILE (the kernel's CA, pinned) or KEYCAP_JWKS_FILE so capabilities are verified with keys from an authenticated source`,
    );
  }
  const fetcher =
    config.jwksFile === undefined
      ? new KernelJwksFetcher(
          () => config.kernelAddress,
          () => peerChannelCredentials(config.tls),
        )
      : undefined;
  const source = await openKeySource(config.jwksFile, fetcher, logger);
  return {
    source,
    close: () => {
      if (source instanceof RemoteJwksSource) source.close();
      fetcher?.close();
    },
  };
}

/**
 * KEYCAP_JWKS_FILE: read and validated now (private material or a bad key stops the
 * start). Otherwise the kernel's GetSigningKeys, cached and refetched on an unknown kid;
 * fetched in the background from the start, and again every half second at most while the
 * kernel cannot be reached, so the first write after the kernel is up does not wait.
 */
async function openKeySource(jwksFile: string | undefined, fetcher: KernelJwksFetcher | undefined, logger: Logger): Promise<PublicKeySource> {
  if (jwksFile !== undefined) {
    try {
      const source = await FileJwksSource.load(jwksFile);
      logger.info({ path: jwksFile }, "verifying capabilities with the keys of a JWKS file");
      return source;
    } catch (err) {
      if (err instanceof JwksError) throw new ConfigError("KEYCAP_JWKS_FILE", err.message);
      throw err;
    }
  }
  if (!fetcher) throw new Error("no key source configured");
  let lastLogged = 0;
  const source = new RemoteJwksSource(() => fetcher.fetch(), {
    // Until the kernel answers, ask again soon (100 ms doubling to 500 ms): a ledger started
    // before its kernel learns the keys within about half a second of the kernel being up.
    retryInitialMs: 100,
    retryMaxMs: 500,
    // One line per 10 s at most: an outage must be visible without flooding the log.
    onFetchError: (cause) => {
      if (Date.now() - lastLogged < 10_000) return;
      lastLogged = Date.now();
      logger.warn({ cause }, `cannot fetch the kernel's signing keys (${cause}); writes with unknown key ids are answered UNAVAILABLE until it answers`);
    },
    onRecovered: () => {
      lastLogged = 0;
      logger.info({}, "kernel signing keys fetched");
    },
  });
  void source.refresh();
  return source;
}
