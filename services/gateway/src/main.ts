import type { Metadata, ServerUnaryCall } from "@grpc/grpc-js";
import { GatewayServiceService, type ForwardRequest, type ForwardResponse, type GatewayServiceServer } from "../../../gen/ts/keycap/gateway/v1/gateway";
import type { Db } from "mongodb";
import { formatHostPort, parseHostPort, type HostPort, type KeycapConfig } from "../../common/src/config";
import { LedgerClient } from "../../../clients/ts/src";
import { LedgerShadowRecorder } from "../../common/src/shadow-recorder";
import { peerChannelCredentials } from "../../common/src/tls";
import type { Metrics } from "../../common/src/metrics";
import { cutoff, RetentionSweeper, type RetentionTask } from "../../common/src/retention-sweeper";
import { startListener, type RunningListener } from "../../common/src/grpc-server";
import { unaryHandler } from "../../common/src/grpc-status";
import type { Logger } from "../../common/src/logger";
import { connectMongo } from "../../common/src/mongo";
import { RejectionAudit } from "../../common/src/rejection-audit";
import { runServices, type RunningService, type ServiceDeps } from "../../common/src/service-runner";
import { sinkService } from "../../common/src/sink-name";
import { openKernelKeys } from "../../capability/src";
import { Sink } from "../../capability/src";
import { DestinationLookup } from "./destination-lookup";
import { ForwardStore } from "./forward-store";
import { Gateway, type ForwardOutput } from "./gateway";
import { HttpSender } from "./http-sender";

export const GATEWAY_SERVICE_NAME = "keycap.gateway.v1.GatewayService";
/** Where `keycap serve gateway` listens when KEYCAP_GATEWAY_LISTEN is not set. */
export const DEFAULT_GATEWAY_LISTEN = "127.0.0.1:50055";
/** Its refusals are recorded as this sink's (`keycap rejections --service sink:gateway`). */
export const GATEWAY_SINK_NAME = "gateway";

/** `keycap serve all`: the gateway only when KEYCAP_GATEWAY_LISTEN is set (`make run` sets it). */
export async function startGatewayIfConfigured(deps: ServiceDeps): Promise<RunningService> {
  if (!deps.config.gatewayListen) return { name: "gateway", listeners: [], stop: async () => undefined };
  return startGateway(deps);
}

/**
 * Starts the HTTP effect gateway: the kernel's keys (as the ledger gets them), MongoDB and
 * the gateway's collection (indexes awaited), then its gRPC listener. Shadow runs' would-be
 * requests are written to the ledger at KEYCAP_LEDGER_ADDRESS.
 */
export async function startGateway(deps: ServiceDeps): Promise<RunningService> {
  const { config } = deps;
  const logger = deps.logger.child({ component: "gateway" });
  const listen: HostPort = config.gatewayListen ?? parseHostPort("KEYCAP_GATEWAY_LISTEN", DEFAULT_GATEWAY_LISTEN);
  const keys = await openKernelKeys(config, logger);
  const mongo = await connectMongo(deps.mongoUri, config.mongodbDatabase, config.mongodbTimeoutMs, { onCommand: deps.metrics?.mongoObserver("gateway") });
  const sender = new HttpSender({ timeoutMs: config.gatewayTimeoutMs, maxResponseBytes: config.gatewayMaxResponseBytes });
  // Shadow runs' would-be requests go to the ledger's shadow store (ADR 0029); the channel connects on first use.
  const shadow = new LedgerShadowRecorder(new LedgerClient(formatHostPort(config.ledgerAddress), peerChannelCredentials(config.tls)));
  let audit: RejectionAudit | undefined;
  let listener: RunningListener | undefined;
  let sweeper: RetentionSweeper | undefined;
  const release = async (graceMs: number): Promise<void> => {
    await listener?.shutdown(graceMs);
    await sweeper?.stop();
    await audit?.close();
    sender.close();
    shadow.close();
    keys.close();
    await mongo.close();
  };
  try {
    const store = await ForwardStore.open(mongo.db);
    audit = await RejectionAudit.open(mongo.db, {
      service: sinkService(GATEWAY_SINK_NAME),
      unauthenticatedPerMinute: config.unauthenticatedAuditPerMinute,
      logger,
      metrics: deps.metrics,
    });
    sweeper = await startGatewayRetention(mongo.db, config, store, audit, logger, deps.metrics);
    const sink = new Sink({
      name: GATEWAY_SINK_NAME,
      // Any tool may come: whether it has a destination is decided per forward, from the registry.
      tools: () => true,
      keys: keys.source,
      verifier: {
        issuer: config.issuer,
        audience: config.audience,
        maxLifetimeSeconds: config.capabilityMaxLifetimeSeconds,
        clockToleranceSeconds: config.clockToleranceSeconds,
      },
      refusals: audit,
      // The gateway applies run modes itself: a replay or shadow forward is never sent (ADR 0029).
      sandbox: "admit",
    });
    const gateway = new Gateway({
      sink,
      destinations: new DestinationLookup(mongo.db),
      store,
      sender,
      logger,
      timeoutMs: config.gatewayTimeoutMs,
      waitMs: config.gatewayWaitMs,
      maxRequestBytes: config.gatewayMaxRequestBytes,
      shadow,
    });
    listener = await startListener({
      name: "gateway",
      address: listen,
      setting: "KEYCAP_GATEWAY_LISTEN",
      logger,
      tls: config.tls.gateway,
      metrics: deps.metrics,
      // Room above the body limit, so an oversized body is refused (and recorded) as PAYLOAD_TOO_LARGE.
      maxReceiveBytes: 2 * config.gatewayMaxRequestBytes + 64 * 1024,
      services: [{ name: GATEWAY_SERVICE_NAME, definition: GatewayServiceService, implementation: gatewayServiceImpl(gateway, logger) }],
    });
  } catch (err) {
    await release(0).catch(() => undefined);
    throw err;
  }
  const running = listener;
  return { name: "gateway", listeners: [running], reload: async () => running.reloadTls(), stop: release };
}

/** The gateway's share of retention (ADR 0031): stored answers, and refusal records (one lease with every other service). */
async function startGatewayRetention(
  db: Db,
  config: KeycapConfig,
  store: ForwardStore,
  audit: RejectionAudit,
  logger: Logger,
  metrics?: Metrics,
): Promise<RetentionSweeper> {
  const { gatewayResultsSeconds, refusalsSeconds, sweepIntervalMs, batch } = config.retention;
  const tasks: RetentionTask[] = [];
  if (gatewayResultsSeconds > 0) tasks.push({ name: "gateway_results", sweep: (limit) => store.expire(cutoff(gatewayResultsSeconds) as Date, limit) });
  if (refusalsSeconds > 0) tasks.push(audit.retentionTask(refusalsSeconds));
  return (await RetentionSweeper.open(db, tasks, { intervalMs: sweepIntervalMs, batch, service: "gateway", logger, metrics })).start();
}

function gatewayServiceImpl(gateway: Gateway, logger: Logger): GatewayServiceServer {
  return {
    forward: unaryHandler(logger, "Forward", async (req: ForwardRequest, call: ServerUnaryCall<ForwardRequest, ForwardResponse>) => {
      const deadline = call.getDeadline();
      const ms = deadline instanceof Date ? deadline.getTime() : deadline;
      const out = await gateway.forward(
        authorizationOf(call.metadata),
        { method: req.method, path: req.path, headers: req.headers, body: Buffer.from(req.body) },
        { peer: call.getPeer(), ...(Number.isFinite(ms) ? { deadline: ms } : {}) },
      );
      return toResponse(out);
    }),
  };
}

function authorizationOf(md: Metadata): string | undefined {
  const values = md.get("authorization");
  // Two values are refused by the verifier as malformed; joined, they cannot pass as one.
  if (values.length > 1) return values.map((v) => (typeof v === "string" ? v : v.toString("latin1"))).join(",");
  const v = values[0];
  return v === undefined ? undefined : typeof v === "string" ? v : v.toString("latin1");
}

function toResponse(out: ForwardOutput): ForwardResponse {
  return {
    status: out.status,
    headers: out.headers.map(([name, value]) => ({ name, value })),
    body: out.body,
    bodyTruncated: out.bodyTruncated,
    replayed: out.replayed,
    key: out.key,
    recordedAt: out.recordedAt,
    requestMismatch: out.requestMismatch,
    attempts: out.attempts,
    mode: out.mode ?? "",
    shadowed: out.shadowed === true,
  };
}

if (require.main === module) void runServices("gateway", [startGateway]);
