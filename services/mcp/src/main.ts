/**
 * `keycap mcp --policy FILE`: the MCP gateway (DESIGN §11, docs/mcp.md). Reads the policy,
 * starts the upstream MCP servers and checks the policy against their tools, registers every
 * governed tool with the kernel (as the runtime principal whose credential it finds by the
 * standard lookup), opens its MongoDB collection, then serves MCP to the host over stdio.
 * Stops when the host closes stdin, or on SIGTERM / SIGINT.
 */
import * as path from "node:path";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { KernelClient, tlsFromEnv } from "../../../clients/ts/src";
import type { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { formatHostPort, loadConfig, parseHostPort } from "../../common/src/config";
import { startMongoServer, type MongoServerHandle } from "../../common/src/embedded-mongo";
import type { Logger } from "../../common/src/logger";
import { Metrics } from "../../common/src/metrics";
import { startMetricsServer } from "../../common/src/metrics-server";
import { connectMongo, type MongoConnection } from "../../common/src/mongo";
import { startSharedMongoServer } from "../../common/src/shared-mongo";
import { CallPath } from "./call-path";
import { governTools, type UpstreamTool } from "./governed-tools";
import { ConnectedHosts, createHostServer, relayNotifications } from "./host-server";
import { RejectionAudit } from "../../common/src/rejection-audit";
import { assertListenable, listenStreamableHttp, MCP_PATH, type HttpSecurity } from "./http-listener";
import { registerGovernedTools } from "./kernel-registration";
import { mcpCallRecorder, NO_RECORDER } from "./mcp-metrics";
import { loadMcpOptions } from "./mcp-options";
import { loadPolicy } from "./policy";
import { startRetention } from "./result-retention";
import { ResultStore } from "./result-store";
import { createStderrLogger } from "./stderr-logger";
import { Upstream } from "./upstream";

type Env = Readonly<Record<string, string | undefined>>;

/** How the host reaches the gateway. */
export interface ServeOptions {
  /** Serve Streamable HTTP on this host:port (overrides KEYCAP_MCP_LISTEN) instead of stdio; off loopback with TLS and a token. */
  http?: string;
}

/**
 * Runs the gateway until the host goes away (stdio) or a signal (SIGTERM, SIGINT). Start failures
 * throw (PolicyError, PolicyMismatchError, RegistrationError, ConfigError).
 */
export async function runMcpGateway(policyFile: string, serve: ServeOptions = {}, env: Env = process.env): Promise<void> {
  const config = loadConfig(env);
  const options = loadMcpOptions(env);
  const listen = serve.http !== undefined ? parseHostPort("--http", serve.http) : options.listen;
  const listenSetting = serve.http !== undefined ? "--http" : "KEYCAP_MCP_LISTEN";
  const security: HttpSecurity = { tls: options.tls, token: options.token };
  if (listen) assertListenable(listen, listenSetting, security);
  const logger = createStderrLogger("mcp", config.logLevel);
  const policy = loadPolicy(path.resolve(policyFile));
  const upstreams: Upstream[] = [];
  // First, as every keycap process does: a metrics address that cannot be bound stops the start.
  const metrics = config.metricsListen ? new Metrics({ toolLabels: config.metricsToolLabels }) : undefined;
  const metricsServer = metrics && config.metricsListen ? await startMetricsServer(config.metricsListen, metrics, logger, config.tls.metrics) : undefined;
  const recorder = metrics ? mcpCallRecorder(metrics) : NO_RECORDER;
  let kernel: KernelClient | undefined;
  let mongoServer: MongoServerHandle | undefined;
  let mongo: MongoConnection | undefined;
  let stopRetention = (): void => undefined;
  let closeAudit = async (): Promise<void> => undefined;
  const release = async (): Promise<void> => {
    stopRetention();
    await closeAudit().catch(() => undefined);
    await Promise.all(upstreams.map((u) => u.close()));
    kernel?.close();
    await mongo?.close().catch(() => undefined);
    await mongoServer?.stop().catch(() => undefined);
    await metricsServer?.close();
  };
  try {
    for (const u of policy.upstreams) upstreams.push(await Upstream.connect(u, logger));
    const listed = new Map<string, UpstreamTool[]>();
    for (const u of upstreams) listed.set(u.name, await u.listTools());
    const tools = governTools(policy, listed);
    const kernelAddress = formatHostPort(config.kernelAddress);
    kernel = new KernelClient(kernelAddress, { tls: tlsFromEnv(env) });
    await registerGovernedTools(kernel, tools);
    mongoServer = await openMongo(config.mongodbUri, config.dataDir, logger);
    mongo = await connectMongo(mongoServer.uri, config.mongodbDatabase, config.mongodbTimeoutMs, metrics ? { onCommand: metrics.mongoObserver("mcp") } : {});
    const store = await ResultStore.open(mongo.db);
    // Refusals of the HTTP listener go to keycap's refusal store like every listener's (DESIGN §9).
    const audit = await RejectionAudit.open(mongo.db, { service: "mcp", unauthenticatedPerMinute: config.unauthenticatedAuditPerMinute, logger });
    closeAudit = () => audit.close();
    security.onRefusal = (reason, message, peer) =>
      audit.record({ method: `HTTP ${MCP_PATH}`, reason, code: "UNAUTHENTICATED", toolIdVerified: false, peer, message });
    stopRetention = startRetention(store, options.resultTtlSeconds, logger);
    const runId = options.runId ?? policy.runId;
    const calls = new CallPath({
      recorder,
      kernel,
      store,
      upstreams: new Map(upstreams.map((u) => [u.name, u])),
      logger,
      timeoutMs: options.timeoutMs,
      waitMs: options.waitMs,
      ...(runId !== undefined ? { defaultRunId: runId } : {}),
    });
    const hosts = new ConnectedHosts();
    relayNotifications(upstreams, hosts, logger);
    const newServer = (): Server => createHostServer({ tools, calls, upstreams, separator: policy.toolNameSeparator, hosts });
    const ready = {
      kernel: kernelAddress,
      upstreams: upstreams.map((u) => u.name),
      tools: tools.map((t) => `${t.exposedName}=${t.policy.class}${t.defaulted ? " (not in the policy)" : ""}`),
    };
    const signalled = new Promise<void>((resolve) => {
      process.once("SIGTERM", resolve);
      process.once("SIGINT", resolve);
    });
    if (listen) {
      const listener = await listenStreamableHttp(listen, listenSetting, newServer, logger, security);
      logger.info(
        { ...ready, http: `${listener.scheme}://${listener.address}${MCP_PATH}`, ...(metricsServer ? { metrics: formatHostPort(metricsServer.address) } : {}) },
        "ready",
      );
      await signalled;
      logger.info({}, "mcp: stopping");
      await listener.close();
      return;
    }
    const server = newServer();
    const closed = new Promise<void>((resolve) => {
      process.stdin.once("end", resolve);
      void signalled.then(resolve);
    });
    await server.connect(new StdioServerTransport());
    logger.info({ ...ready, ...(metricsServer ? { metrics: formatHostPort(metricsServer.address) } : {}) }, "ready");
    await closed;
    logger.info({}, "mcp: the host went away; stopping");
    await server.close().catch(() => undefined);
  } finally {
    await release();
  }
}

/** MONGODB_URI, else the data directory's shared embedded server (the one `make run` starts). */
function openMongo(uri: string | undefined, dataDir: string, logger: Logger): Promise<MongoServerHandle> {
  if (uri !== undefined) return startMongoServer({ logger, uri });
  const dir = path.join(dataDir, "mongo");
  return startSharedMongoServer({ logger, dir, start: (listen) => startMongoServer({ logger, uri: "", dataDir: dir, ...(listen ? { listen } : {}) }) });
}

if (require.main === module) {
  const file = process.argv[2];
  if (!file) {
    process.stderr.write("usage: node dist/services/mcp/src/main.js POLICY_FILE\n");
    process.exit(2);
  }
  runMcpGateway(file, {}).then(
    () => process.exit(0),
    (err: unknown) => {
      process.stderr.write(`keycap mcp: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exit(2);
    },
  );
}
