import { LedgerServiceService } from "../../../gen/ts/keycap/ledger/v1/ledger";
import { LedgerAdminServiceService } from "../../../gen/ts/keycap/ledger/v1/ledger_admin";
import { connectMongo } from "../../common/src/mongo";
import { readTotals } from "../../common/src/stats-counters";
import { RejectionAudit } from "../../common/src/rejection-audit";
import { runServices, type RunningService, type ServiceDeps } from "../../common/src/service-runner";
import { startScoped } from "../../common/src/service-scope";
import { loadAdminCredential } from "../../common/src/admin-credential";
import { adminServiceImpl, LedgerAdmin } from "./admin-service";
import { CapabilityVerifier } from "../../capability/src";
import { ShadowStore } from "./shadow-store";
import { EntryStore } from "./entry-store";
import { openKernelKeys } from "../../capability/src";
import { Ledger } from "./ledger";
import { ledgerServiceImpl } from "./ledger-grpc";
import { startLedgerRetention } from "./ledger-retention";
import { loadReceiptKey } from "../../common/src/receipt-key";

export const LEDGER_SERVICE_NAME = "keycap.ledger.v1.LedgerService";
export const LEDGER_ADMIN_SERVICE_NAME = "keycap.ledger.v1.LedgerAdminService";

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
  return startScoped("ledger", async (scope) => {
    const keys = scope.own(await openKernelKeys(config, logger), (k) => k.close());
    const mongo = scope.own(
      await connectMongo(deps.mongoUri, config.mongodbDatabase, config.mongodbTimeoutMs, { onCommand: deps.metrics?.mongoObserver("ledger") }),
      (m) => m.close(),
    );
    const store = scope.own(await EntryStore.open(mongo.db, logger), (e) => e.close());
    const audit = scope.own(
      await RejectionAudit.open(mongo.db, { service: "ledger", unauthenticatedPerMinute: config.unauthenticatedAuditPerMinute, logger, metrics: deps.metrics }),
      (a) => a.close(),
    );
    const shadow = await ShadowStore.open(mongo.db);
    scope.own(await startLedgerRetention(mongo.db, config, { store, audit, shadow }, logger, deps.metrics), (s) => s.stop());
    const verifier = new CapabilityVerifier(keys.source, {
      issuer: config.issuer,
      audience: config.audience,
      maxLifetimeSeconds: config.capabilityMaxLifetimeSeconds,
      clockToleranceSeconds: config.clockToleranceSeconds,
      // Shadow and replay capabilities verify here; the ledger writes nothing live for them (ADR 0028).
      sandbox: "verify",
    });
    const ledger = new Ledger({
      verifier,
      entries: store,
      shadow,
      audit,
      maxPayloadBytes: config.maxPayloadBytes,
      clockToleranceSeconds: config.clockToleranceSeconds,
      logger,
      metrics: deps.metrics,
      receiptKey: await loadReceiptKey(mongo.db),
    });
    await scope.listen({
      name: "ledger",
      address: config.ledgerListen,
      setting: "KEYCAP_LEDGER_LISTEN",
      logger,
      tls: config.tls.ledger,
      metrics: deps.metrics,
      // Room above the payload limit, so an oversized payload reaches the ledger and is
      // refused (and recorded) as PAYLOAD_TOO_LARGE rather than cut off by the transport.
      // And room for a Writes batch, whose writes clients keep small (ADR 0037).
      maxReceiveBytes: Math.max(2 * config.maxPayloadBytes, WRITES_BATCH_ROOM_BYTES) + 64 * 1024,
      services: [{ name: LEDGER_SERVICE_NAME, definition: LedgerServiceService, implementation: ledgerServiceImpl(ledger, logger, audit) }],
    });
    const admin = new LedgerAdmin(store, audit, { queryTimeMs: config.operatorQueryTimeoutMs, readTotals: (ms) => readTotals(mongo.db, ms) });
    await scope.listen({
      name: "admin",
      address: config.adminListen,
      setting: "KEYCAP_ADMIN_LISTEN",
      logger,
      tls: config.tls.admin,
      metrics: deps.metrics,
      services: [{ name: LEDGER_ADMIN_SERVICE_NAME, definition: LedgerAdminServiceService, implementation: adminServiceImpl(admin, credential, logger) }],
    });
    return {
      reload: async () => {
        for (const l of scope.listeners) l.reloadTls();
      },
    };
  });
}

/**
 * What a Writes batch may carry at least, whatever the payload limit: the TypeScript client
 * batches up to 32 writes of at most 16 KiB each (clients/ts/src/ledger-client.ts).
 */
const WRITES_BATCH_ROOM_BYTES = 1024 * 1024;

if (require.main === module) void runServices("ledger", [startLedger]);
