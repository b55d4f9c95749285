import { KernelServiceService } from "../../../gen/ts/keycap/kernel/v1/kernel";
import { ConfigError } from "../../common/src/config";
import { startListener } from "../../common/src/grpc-server";
import { connectMongo } from "../../common/src/mongo";
import { runServices, type RunningService, type ServiceDeps } from "../../common/src/service-runner";
import { CallJournal } from "./call-journal";
import { CapabilityMinter } from "./capability-minter";
import { Kernel, kernelServiceImpl } from "./kernel-service";
import { GrpcLedgerLookup } from "./ledger-lookup";
import { loadOrCreateSigningKeys, SigningKeyFileError, type SigningKeys } from "./signing-keys";
import { ToolRegistry } from "./tool-registry";

export const KERNEL_SERVICE_NAME = "keycap.kernel.v1.KernelService";

/** Starts the kernel: signing keys, MongoDB, indexes (awaited), then the gRPC listener. */
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

  const mongo = await connectMongo(deps.mongoUri, config.mongodbDatabase, config.mongodbTimeoutMs);
  const ledger = new GrpcLedgerLookup(() => config.ledgerAddress);
  try {
    const kernel = new Kernel({
      registry: await ToolRegistry.open(mongo.db),
      journal: await CallJournal.open(mongo.db, logger),
      minter,
      keys,
      ledger,
      limits: { maxBytes: config.maxArgumentsBytes, maxDepth: config.maxArgumentsDepth },
      logger,
    });
    const listener = await startListener({
      name: "kernel",
      address: config.kernelListen,
      logger,
      maxReceiveBytes: config.maxArgumentsBytes + 64 * 1024,
      services: [{ name: KERNEL_SERVICE_NAME, definition: KernelServiceService, implementation: kernelServiceImpl(kernel, logger) }],
    });
    return {
      name: "kernel",
      listeners: [listener],
      reload: async () => {
        const fresh = await loadKeys();
        kernel.useSigningKeys(fresh.keys, fresh.minter);
      },
      stop: async (graceMs) => {
        await listener.shutdown(graceMs);
        ledger.close();
        await mongo.close();
      },
    };
  } catch (err) {
    ledger.close();
    await mongo.close();
    throw err;
  }
}

if (require.main === module) void runServices("kernel", [startKernel]);
