import { LedgerServiceService } from "../../../gen/ts/keycap/ledger/v1/ledger";
import { LedgerAdminServiceService } from "../../../gen/ts/keycap/ledger/v1/ledger_admin";
import { ConfigError } from "../../common/src/config";
import { startListener, type RunningListener } from "../../common/src/grpc-server";
import type { Logger } from "../../common/src/logger";
import { connectMongo } from "../../common/src/mongo";
import { peerChannelCredentials } from "../../common/src/tls";
import { isLoopback } from "../../common/src/tls-config";
import { RejectionAudit } from "../../common/src/rejection-audit";
import { runServices, type RunningService, type ServiceDeps } from "../../common/src/service-runner";
import { loadAdminCredential } from "../../common/src/admin-credential";
import { adminServiceImpl, LedgerAdmin } from "./admin-service";
import { CapabilityVerifier } from "./capability-verifier";
import { EntryStore } from "./entry-store";
import { FileJwksSource, JwksError, KernelJwksFetcher, RemoteJwksSource, type PublicKeySource } from "./key-sources";
import { Ledger, ledgerServiceImpl } from "./ledger-service";

export const LEDGER_SERVICE_NAME = "keycap.ledger.v1.LedgerService";
export const LEDGER_ADMIN_SERVICE_NAME = "keycap.ledger.v1.LedgerAdminService";

// Spent capability ids are forgotten once their capability has expired (FerretDB has no TTL).
const PRUNE_INTERVAL_MS = 10 * 60_000;

/**
 * Starts the ledger: admin credential and key source (configuration errors stop the start
 * before anything else), MongoDB and its indexes (awaited), then the ledger and admin
 * listeners. With no KEYCAP_JWKS_FILE the keys are fetched from the kernel at
 * config.kernelAddress when first needed, so the ledger starts even if the kernel is not up.
 */
export async function startLedger(deps: ServiceDeps): Promise<RunningService> {
  const { config } = deps;
  const logger = deps.logger.child({ component: "ledger" });

  const credential = await loadAdminCredential(config, logger);

  if (config.jwksFile === undefined && config.tls.peerCaFile === undefined && !isLoopback(config.kernelAddress.host)) {
    // Whoever answers on that address would choose the keys the ledger trusts; no override.
    throw new ConfigError(
      "KEYCAP_KERNEL_ADDRESS",
      `${config.kernelAddress.host} is not loopback: set KEYCAP_TLS_CA_FILE (the kernel's CA, pinned) or KEYCAP_JWKS_FILE so the ledger learns the kernel's keys from an authenticated source`,
    );
  }
  const fetcher =
    config.jwksFile === undefined
      ? new KernelJwksFetcher(
          () => config.kernelAddress,
          () => peerChannelCredentials(config.tls),
        )
      : undefined;
  const keySource = await openKeySource(config.jwksFile, fetcher, logger);

  const mongo = await connectMongo(deps.mongoUri, config.mongodbDatabase, config.mongodbTimeoutMs, { onCommand: deps.metrics?.mongoObserver("ledger") });
  const listeners: RunningListener[] = [];
  let audit: RejectionAudit | undefined;
  let pruneTimer: NodeJS.Timeout | undefined;
  const release = async (graceMs: number): Promise<void> => {
    await Promise.all(listeners.map((l) => l.shutdown(graceMs)));
    if (pruneTimer) clearInterval(pruneTimer);
    await audit?.close();
    if (keySource instanceof RemoteJwksSource) keySource.close();
    fetcher?.close();
    await mongo.close();
  };

  try {
    const entries = await EntryStore.open(mongo.db);
    audit = await RejectionAudit.open(mongo.db, {
      service: "ledger",
      unauthenticatedPerMinute: config.unauthenticatedAuditPerMinute,
      logger,
      metrics: deps.metrics,
    });
    const prune = (): void => {
      entries.pruneSpentCapabilities().then(
        (n) => n > 0 && logger.debug({ removed: n }, "forgot expired spent capability ids"),
        (err: unknown) => logger.warn({ err }, "could not prune spent capability ids"),
      );
    };
    prune();
    pruneTimer = setInterval(prune, PRUNE_INTERVAL_MS);
    pruneTimer.unref();

    const verifier = new CapabilityVerifier(keySource, {
      issuer: config.issuer,
      audience: config.audience,
      maxLifetimeSeconds: config.capabilityMaxLifetimeSeconds,
      clockToleranceSeconds: config.clockToleranceSeconds,
    });
    const ledger = new Ledger({
      verifier,
      entries,
      audit,
      maxPayloadBytes: config.maxPayloadBytes,
      clockToleranceSeconds: config.clockToleranceSeconds,
      logger,
      metrics: deps.metrics,
    });

    listeners.push(
      await startListener({
        name: "ledger",
        address: config.ledgerListen,
        setting: "KEYCAP_LEDGER_LISTEN",
        logger,
        tls: config.tls.ledger,
        metrics: deps.metrics,
        // Room above the payload limit, so an oversized payload reaches the ledger and is
        // refused (and recorded) as PAYLOAD_TOO_LARGE rather than cut off by the transport.
        maxReceiveBytes: 2 * config.maxPayloadBytes + 64 * 1024,
        services: [{ name: LEDGER_SERVICE_NAME, definition: LedgerServiceService, implementation: ledgerServiceImpl(ledger, logger) }],
      }),
    );
    listeners.push(
      await startListener({
        name: "admin",
        address: config.adminListen,
        setting: "KEYCAP_ADMIN_LISTEN",
        logger,
        tls: config.tls.admin,
        metrics: deps.metrics,
        services: [
          {
            name: LEDGER_ADMIN_SERVICE_NAME,
            definition: LedgerAdminServiceService,
            implementation: adminServiceImpl(new LedgerAdmin(entries, audit), credential, logger),
          },
        ],
      }),
    );
  } catch (err) {
    await release(0).catch(() => undefined);
    throw err;
  }

  return {
    name: "ledger",
    listeners: [...listeners],
    reload: async () => {
      for (const l of listeners) l.reloadTls();
    },
    stop: release,
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

if (require.main === module) void runServices("ledger", [startLedger]);
