/**
 * The HTTP endpoint Prometheus scrapes: `GET /metrics` on KEYCAP_METRICS_LISTEN, one per
 * process (ADR 0017). Anything else is 404; nothing here reaches a service.
 */
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { ConfigError, formatHostPort, type HostPort } from "./config";
import type { Logger } from "./logger";
import type { Metrics } from "./metrics";

export const METRICS_SETTING = "KEYCAP_METRICS_LISTEN";

export interface RunningMetricsServer {
  /** The bound address (the real port when 0 was asked for). */
  address: HostPort;
  close(): Promise<void>;
}

export async function startMetricsServer(address: HostPort, metrics: Metrics, logger: Logger): Promise<RunningMetricsServer> {
  const server = http.createServer((req, res) => {
    if (req.method !== "GET" || (req.url ?? "").split("?")[0] !== "/metrics") {
      res.writeHead(404, { "content-type": "text/plain" }).end("keycap serves only GET /metrics here\n");
      return;
    }
    metrics.registry.metrics().then(
      (body) => res.writeHead(200, { "content-type": metrics.registry.contentType }).end(body),
      (err: unknown) => {
        logger.warn({ err: String(err) }, "could not collect metrics");
        res.writeHead(500, { "content-type": "text/plain" }).end("could not collect metrics\n");
      },
    );
  });
  // A scraper holding idle keep-alive connections must not delay a shutdown.
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", (err: NodeJS.ErrnoException) => reject(bindError(address, err)));
    server.listen(address.port, address.host, () => resolve());
  });
  const bound = { host: address.host, port: (server.address() as AddressInfo).port };
  logger.info({ listener: "metrics", address: formatHostPort(bound) }, "serving metrics");
  return {
    address: bound,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

function bindError(address: HostPort, err: NodeJS.ErrnoException): ConfigError {
  const where = formatHostPort(address);
  if (err.code === "EADDRINUSE") return new ConfigError(METRICS_SETTING, `${where} is already in use (set ${METRICS_SETTING} to a free address)`);
  if (err.code === "EACCES") return new ConfigError(METRICS_SETTING, `${where}: not permitted to listen on this port`);
  if (err.code === "EADDRNOTAVAIL") return new ConfigError(METRICS_SETTING, `${where} is not an address of this machine`);
  return new ConfigError(METRICS_SETTING, `cannot listen on ${where}: ${err.message}`);
}
