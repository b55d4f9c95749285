import { KernelServiceService } from "../../../gen/ts/keycap/kernel/v1/kernel";
import { unimplemented } from "../../common/src/grpc-status";
import { startListener } from "../../common/src/grpc-server";
import { runServices, type RunningService, type ServiceDeps } from "../../common/src/service-runner";
import { connectMongo } from "../../common/src/mongo";

export const KERNEL_SERVICE_NAME = "keycap.kernel.v1.KernelService";

/** Starts the kernel: MongoDB, indexes, signing keys, then the gRPC listener. */
export async function startKernel(deps: ServiceDeps): Promise<RunningService> {
  const { config } = deps;
  const logger = deps.logger.child({ component: "kernel" });
  const mongo = await connectMongo(deps.mongoUri, config.mongodbDatabase, config.mongodbTimeoutMs);
  const implementation = Object.fromEntries(Object.keys(KernelServiceService).map((m) => [m, unimplemented(m)]));
  const listener = await startListener({
    name: "kernel",
    address: config.kernelListen,
    logger,
    services: [{ name: KERNEL_SERVICE_NAME, definition: KernelServiceService, implementation }],
  });
  return {
    name: "kernel",
    listeners: [listener],
    stop: async (graceMs) => {
      await listener.shutdown(graceMs);
      await mongo.close();
    },
  };
}

if (require.main === module) void runServices("kernel", [startKernel]);
