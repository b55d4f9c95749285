import { AccessServiceService } from "../../../gen/ts/keycap/kernel/v1/access";
import { KernelServiceService } from "../../../gen/ts/keycap/kernel/v1/kernel";
import { loadAdminCredential } from "../../common/src/admin-credential";
import { ConfigError, formatHostPort } from "../../common/src/config";
import { startListener } from "../../common/src/grpc-server";
import { connectMongo } from "../../common/src/mongo";
import { RejectionAudit } from "../../common/src/rejection-audit";
import { runServices, type RunningService, type ServiceDeps } from "../../common/src/service-runner";
import { peerChannelCredentials } from "../../common/src/tls";
import { AccessPolicy } from "./access-policy";
import { Access, accessServiceImpl } from "./access-service";
import { bootstrapRuntime } from "./bootstrap-runtime";
import { CallJournal } from "./call-journal";
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
  const loadKeys = async (): Promise<{ keys: SigningKeys; minter: CapabilityMinter }> => {
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
  };
  const { keys, minter } = await loadKeys();
  const admin = await loadAdminCredential(config, logger);

  const mongo = await connectMongo(deps.mongoUri, config.mongodbDatabase, config.mongodbTimeoutMs, { onCommand: deps.metrics?.mongoObserver("kernel") });
  const ledger = new GrpcLedgerLookup(
    () => config.ledgerAddress,
    () => peerChannelCredentials(config.tls),
  );
  let audit: RejectionAudit | undefined;
  let journal: CallJournal | undefined;
  const release = async (): Promise<void> => {
    await journal?.close();
    ledger.close();
    await audit?.close();
    await mongo.close();
  };
  try {
    const cache = { cacheMs: config.principalCacheMs };
    const principals = await PrincipalStore.open(mongo.db, cache);
    const grants = await GrantStore.open(mongo.db, cache);
    const registry = await ToolRegistry.open(mongo.db);
    audit = await RejectionAudit.open(mongo.db, {
      service: "kernel",
      unauthenticatedPerMinute: config.unauthenticatedAuditPerMinute,
      logger,
      metrics: deps.metrics,
    });
    if (config.bootstrapRuntime) await bootstrapRuntime(principals, { token: config.runtimeToken, file: config.runtimeTokenFile, logger });

    const policy = new AccessPolicy(registry, grants);
    const edge = { auth: new CallerAuthenticator(principals, admin, config.tls.certPrincipals), audit, logger };
    journal = await CallJournal.open(mongo.db, logger);
    const counted = journal;
    deps.metrics?.callGauges(() => counted.counts());
    const kernel = new Kernel({
      registry,
      journal,
      minter,
      keys,
      ledger,
      limits: { maxBytes: config.maxArgumentsBytes, maxDepth: config.maxArgumentsDepth },
      logger,
      access: policy,
    });
    const access = new Access({ principals, grants, registry, policy, logger });
    const listener = await startListener({
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
    const removePidFile = writeKernelPidFile(config.dataDir, formatHostPort(listener.address));
    return {
      name: "kernel",
      listeners: [listener],
      reload: async () => {
        const fresh = await loadKeys();
        kernel.useSigningKeys(fresh.keys, fresh.minter);
        listener.reloadTls();
      },
      stop: async (graceMs) => {
        removePidFile();
        await listener.shutdown(graceMs);
        await release();
      },
    };
  } catch (err) {
    await release();
    throw err;
  }
}

if (require.main === module) void runServices("kernel", [startKernel]);
