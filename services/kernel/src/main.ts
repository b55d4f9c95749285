import { AccessServiceService } from "../../../gen/ts/keycap/kernel/v1/access";
import { KernelServiceService } from "../../../gen/ts/keycap/kernel/v1/kernel";
import { loadAdminCredential } from "../../common/src/admin-credential";
import { ConfigError, formatHostPort, type KeycapConfig } from "../../common/src/config";
import type { Logger } from "../../common/src/logger";
import { connectMongo } from "../../common/src/mongo";
import { RejectionAudit } from "../../common/src/rejection-audit";
import { runServices, type RunningService, type ServiceDeps } from "../../common/src/service-runner";
import { startScoped } from "../../common/src/service-scope";
import { peerChannelCredentials } from "../../common/src/tls";
import { AccessPolicy } from "./access-policy";
import { Access, accessServiceImpl } from "./access-service";
import { bootstrapRuntime } from "./bootstrap-runtime";
import { CallJournal } from "./call-journal";
import { ReplayMatcher } from "./replay-matcher";
import { ReplayPositions } from "./replay-positions";
import { startKernelRetention } from "./kernel-retention";
import { CallerAuthenticator } from "./caller-auth";
import { CapabilityMinter } from "./capability-minter";
import { GrantStore } from "./grant-store";
import { Kernel } from "./kernel";
import { kernelServiceImpl } from "./kernel-grpc";
import { GrpcLedgerLookup } from "./ledger-lookup";
import { writeKernelPidFile } from "./pid-file";
import { PrincipalStore } from "./principal-store";
import { loadOrCreateSigningKeys, SigningKeyFileError, type SigningKeys } from "./signing-keys";
import { ToolRegistry } from "./tool-registry";

export const KERNEL_SERVICE_NAME = "keycap.kernel.v1.KernelService";
export const ACCESS_SERVICE_NAME = "keycap.kernel.v1.AccessService";

/**
 * Starts the kernel: signing keys and admin credential, MongoDB and its indexes
 * (awaited), the local runtime principal, then the gRPC listener with KernelService
 * and AccessService, every call authenticated (DESIGN §9).
 */
export async function startKernel(deps: ServiceDeps): Promise<RunningService> {
  const { config } = deps;
  const logger = deps.logger.child({ component: "kernel" });
  // Loaded at start and again on SIGHUP (after `keycap keys rotate`).
  const { keys, minter } = await loadSigningKeys(config, logger);
  const admin = await loadAdminCredential(config, logger);
  return startScoped("kernel", async (scope) => {
    const mongo = scope.own(
      await connectMongo(deps.mongoUri, config.mongodbDatabase, config.mongodbTimeoutMs, { onCommand: deps.metrics?.mongoObserver("kernel") }),
      (m) => m.close(),
    );
    const audit = scope.own(
      await RejectionAudit.open(mongo.db, { service: "kernel", unauthenticatedPerMinute: config.unauthenticatedAuditPerMinute, logger, metrics: deps.metrics }),
      (a) => a.close(),
    );
    const ledger = scope.own(
      new GrpcLedgerLookup(
        () => config.ledgerAddress,
        () => peerChannelCredentials(config.tls),
      ),
      (l) => l.close(),
    );
    const cache = { cacheMs: config.principalCacheMs };
    const principals = await PrincipalStore.open(mongo.db, cache);
    const grants = await GrantStore.open(mongo.db, cache);
    const registry = await ToolRegistry.open(mongo.db);
    if (config.bootstrapRuntime) await bootstrapRuntime(principals, { token: config.runtimeToken, file: config.runtimeTokenFile, logger });
    const journal = scope.own(await CallJournal.open(mongo.db, logger, { listTimeMs: config.operatorQueryTimeoutMs }), (j) => j.close());
    deps.metrics?.callGauges(() => journal.counts());

    const policy = new AccessPolicy(registry, grants);
    const edge = { auth: new CallerAuthenticator(principals, admin, config.tls.certPrincipals), audit, logger };
    const limits = { maxBytes: config.maxArgumentsBytes, maxDepth: config.maxArgumentsDepth };
    const positions = await ReplayPositions.open(mongo.db);
    const replay = new ReplayMatcher(journal, positions);
    scope.own(await startKernelRetention(mongo.db, config, { journal, positions, audit }, logger, deps.metrics), (s) => s.stop());
    const kernel = new Kernel({ registry, journal, minter, keys, ledger, limits, logger, access: policy, replay, metrics: deps.metrics });
    const access = new Access({ principals, grants, registry, policy, logger });
    const listener = await scope.listen({
      name: "kernel",
      address: config.kernelListen,
      setting: "KEYCAP_KERNEL_LISTEN",
      logger,
      tls: config.tls.kernel,
      metrics: deps.metrics,
      maxReceiveBytes: config.maxArgumentsBytes + 64 * 1024,
      services: [
        { name: KERNEL_SERVICE_NAME, definition: KernelServiceService, implementation: kernelServiceImpl(kernel, edge) },
        { name: ACCESS_SERVICE_NAME, definition: AccessServiceService, implementation: accessServiceImpl(access, edge) },
      ],
    });
    scope.onStop(writeKernelPidFile(config.dataDir, formatHostPort(listener.address)));
    return {
      reload: async () => {
        const fresh = await loadSigningKeys(config, logger);
        kernel.useSigningKeys(fresh.keys, fresh.minter);
        listener.reloadTls();
      },
    };
  });
}

/** The signing keys (created on first start) and a minter that signs with the current one. */
async function loadSigningKeys(config: KeycapConfig, logger: Logger): Promise<{ keys: SigningKeys; minter: CapabilityMinter }> {
  let keys: SigningKeys;
  try {
    keys = await loadOrCreateSigningKeys(config.signingKeyFile, { retiredGraceSeconds: config.retiredKeyGraceSeconds });
  } catch (err) {
    if (err instanceof SigningKeyFileError) throw new ConfigError("KEYCAP_SIGNING_KEY_FILE", err.message);
    throw err;
  }
  if (keys.insecurePermissions) logger.warn({ path: keys.path }, "signing key file is readable by group or others; chmod 600 it");
  logger.info({ path: keys.path, kid: keys.currentKid }, "signing key loaded");
  const minter = new CapabilityMinter(keys, { issuer: config.issuer, audience: config.audience, lifetimeSeconds: config.capabilityTtlSeconds });
  return { keys, minter };
}

if (require.main === module) void runServices("kernel", [startKernel]);
