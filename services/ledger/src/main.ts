import { LedgerServiceService } from "../../../gen/ts/keycap/ledger/v1/ledger";
import { LedgerAdminServiceService } from "../../../gen/ts/keycap/ledger/v1/ledger_admin";
import { unimplemented } from "../../common/src/grpc-status";
import { startListener } from "../../common/src/grpc-server";
import { runServices, type RunningService, type ServiceDeps } from "../../common/src/service-runner";
import { connectMongo } from "../../common/src/mongo";

export const LEDGER_SERVICE_NAME = "keycap.ledger.v1.LedgerService";
export const LEDGER_ADMIN_SERVICE_NAME = "keycap.ledger.v1.LedgerAdminService";

/** Starts the ledger: MongoDB, indexes, key source, then the ledger and admin listeners. */
export async function startLedger(deps: ServiceDeps): Promise<RunningService> {
  const { config } = deps;
  const logger = deps.logger.child({ component: "ledger" });
  const mongo = await connectMongo(deps.mongoUri, config.mongodbDatabase, config.mongodbTimeoutMs);
  const ledgerImpl = Object.fromEntries(Object.keys(LedgerServiceService).map((m) => [m, unimplemented(m)]));
  const adminImpl = Object.fromEntries(Object.keys(LedgerAdminServiceService).map((m) => [m, unimplemented(m)]));
  const ledger = await startListener({
    name: "ledger",
    address: config.ledgerListen,
    logger,
    maxReceiveBytes: 2 * config.maxPayloadBytes + 64 * 1024,
    services: [{ name: LEDGER_SERVICE_NAME, definition: LedgerServiceService, implementation: ledgerImpl }],
  });
  const admin = await startListener({
    name: "admin",
    address: config.adminListen,
    logger,
    services: [{ name: LEDGER_ADMIN_SERVICE_NAME, definition: LedgerAdminServiceService, implementation: adminImpl }],
  });
  return {
    name: "ledger",
    listeners: [ledger, admin],
    stop: async (graceMs) => {
      await Promise.all([ledger.shutdown(graceMs), admin.shutdown(graceMs)]);
      await mongo.close();
    },
  };
}

if (require.main === module) void runServices("ledger", [startLedger]);
