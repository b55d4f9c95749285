/**
 * `keycap mcp --policy FILE`: the MCP gateway (DESIGN §11, docs/mcp.md). Reads the policy,
 * starts the upstream MCP servers and checks the policy against their tools, registers every
 * governed tool with the kernel (as the runtime principal whose credential it finds by the
 * standard lookup), opens its MongoDB collection, then serves MCP to the host over stdio.
 * Stops when the host closes stdin, or on SIGTERM / SIGINT.
 */
import * as path from "node:path";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { channelCredentials, KernelClient, LedgerClient, tlsFromEnv } from "../../../clients/ts/src";
import { LedgerShadowRecorder } from "../../common/src/shadow-recorder";
import type { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { formatHostPort, loadConfig, parseHostPort, type KeycapConfig } from "../../common/src/config";
import { startMongoServer, type MongoServerHandle } from "../../common/src/embedded-mongo";
import type { Logger } from "../../common/src/logger";
import { Metrics } from "../../common/src/metrics";
import { startMetricsServer } from "../../common/src/metrics-server";
import { connectMongo } from "../../common/src/mongo";
import { ServiceScope } from "../../common/src/service-scope";
import { startSharedMongoServer } from "../../common/src/shared-mongo";
import { CallPath } from "./call-path";
import { governTools, type UpstreamTool } from "./governed-tools";
import { ConnectedHosts, createHostServer, relayNotifications } from "./host-server";
import { RejectionAudit } from "../../common/src/rejection-audit";
import { assertListenable, listenStreamableHttp, MCP_PATH, type HttpSecurity } from "./http-listener";
import { registerGovernedTools } from "./kernel-registration";
import { mcpCallRecorder, NO_RECORDER } from "./mcp-metrics";
import { loadMcpOptions, type McpOptions } from "./mcp-options";
import { loadPolicy, type Policy } from "./policy";
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
  // Closed last-first when the gateway stops, or at once when its start fails.
  const scope = new ServiceScope();
  try {
    // First, as every keycap process does: a metrics address that cannot be bound stops the start.
    const metrics = config.metricsListen ? new Metrics({ toolLabels: config.metricsToolLabels }) : undefined;
    const metricsServer =
      metrics && config.metricsListen
        ? scope.own(await startMetricsServer(config.metricsListen, metrics, logger, config.tls.metrics), (m) => m.close())
        : undefined;
    const gateway = await startGateway(scope, { config, options, policy, logger, metrics, security, env });
    const ready = { ...gateway.ready, ...(metricsServer ? { metrics: formatHostPort(metricsServer.address) } : {}) };
    const signalled = new Promise<void>((resolve) => {
      process.once("SIGTERM", resolve);
      process.once("SIGINT", resolve);
    });
    if (listen) {
      const listener = await listenStreamableHttp(listen, listenSetting, gateway.newServer, logger, security);
      logger.info({ ...ready, http: `${listener.scheme}://${listener.address}${MCP_PATH}` }, "ready");
      await signalled;
      logger.info({}, "mcp: stopping");
      await listener.close();
      return;
    }
    const server = gateway.newServer();
    const closed = new Promise<void>((resolve) => {
      process.stdin.once("end", resolve);
      void signalled.then(resolve);
    });
    await server.connect(new StdioServerTransport());
    logger.info(ready, "ready");
    await closed;
    logger.info({}, "mcp: the host went away; stopping");
    await server.close().catch(() => undefined);
  } finally {
    await scope.close(0);
  }
}

interface GatewayParts {
  config: KeycapConfig;
  options: McpOptions;
  policy: Policy;
  logger: Logger;
  metrics: Metrics | undefined;
  security: HttpSecurity;
  env: Env;
}

/**
 * Starts the upstreams and checks the policy against their tools, registers the governed tools
 * with the kernel, opens the result store and the refusal audit: everything a host's MCP
 * session needs, each piece registered in `scope`.
 */
async function startGateway(scope: ServiceScope, p: GatewayParts): Promise<{ newServer: () => Server; ready: Record<string, unknown> }> {
  const { config, options, policy, logger, metrics, security } = p;
  const quietly = (close: () => Promise<unknown>) => () =>
    close().then(
      () => undefined,
      () => undefined,
    );
  const upstreams: Upstream[] = [];
  for (const u of policy.upstreams) {
    const upstream = await Upstream.connect(u, logger);
    scope.onStop(() => upstream.close());
    upstreams.push(upstream);
  }
  const listed = new Map<string, UpstreamTool[]>();
  for (const u of upstreams) listed.set(u.name, await u.listTools());
  const tools = governTools(policy, listed);
  const kernelAddress = formatHostPort(config.kernelAddress);
  const kernel = scope.own(new KernelClient(kernelAddress, { tls: tlsFromEnv(p.env) }), (k) => k.close());
  await registerGovernedTools(kernel, tools);
  const mongoServer = await openMongo(config.mongodbUri, config.dataDir, logger);
  scope.onStop(quietly(() => mongoServer.stop()));
  const mongo = await connectMongo(
    mongoServer.uri,
    config.mongodbDatabase,
    config.mongodbTimeoutMs,
    metrics ? { onCommand: metrics.mongoObserver("mcp") } : {},
  );
  scope.onStop(quietly(() => mongo.close()));
  const store = await ResultStore.open(mongo.db);
  // Refusals of the HTTP listener go to keycap's refusal store like every listener's (DESIGN §9).
  const audit = await RejectionAudit.open(mongo.db, { service: "mcp", unauthenticatedPerMinute: config.unauthenticatedAuditPerMinute, logger });
  scope.onStop(quietly(() => audit.close()));
  security.onRefusal = (reason, message, peer) =>
    audit.record({ method: `HTTP ${MCP_PATH}`, reason, code: "UNAUTHENTICATED", toolIdVerified: false, peer, message });
  scope.onStop(await startRetention(mongo.db, store, options.resultTtlSeconds, config, logger, metrics));
  const runId = options.runId ?? policy.runId;
  // Shadow runs' would-be calls go to the ledger's shadow store (ADR 0029); the channel connects on first use.
  const ledgerAddress = formatHostPort(config.ledgerAddress);
  const shadow = scope.own(new LedgerShadowRecorder(new LedgerClient(ledgerAddress, channelCredentials(tlsFromEnv(p.env)))), (r) => r.close());
  const calls = new CallPath({
    recorder: metrics ? mcpCallRecorder(metrics) : NO_RECORDER,
    kernel,
    store,
    upstreams: new Map(upstreams.map((u) => [u.name, u])),
    logger,
    timeoutMs: options.timeoutMs,
    waitMs: options.waitMs,
    ...(runId !== undefined ? { defaultRunId: runId } : {}),
    runMode: options.runMode,
    shadow,
    refusals: audit,
  });
  const hosts = new ConnectedHosts();
  relayNotifications(upstreams, hosts, logger);
  return {
    newServer: () => createHostServer({ tools, calls, upstreams, separator: policy.toolNameSeparator, hosts }),
    ready: {
      kernel: kernelAddress,
      upstreams: upstreams.map((u) => u.name),
      tools: tools.map((t) => `${t.exposedName}=${t.policy.class}${t.defaulted ? " (not in the policy)" : ""}`),
    },
  };
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
