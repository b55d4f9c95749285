/**
 * The HTTP endpoint Prometheus scrapes: `GET /metrics` on KEYCAP_METRICS_LISTEN, one per
 * process (ADR 0017). Anything else is 404; nothing here reaches a service.
 */
import * as fs from "node:fs";
import * as http from "node:http";
import * as https from "node:https";
import type { AddressInfo } from "node:net";
import { ConfigError, formatHostPort, type HostPort } from "./config";
import type { Logger } from "./logger";
import type { Metrics } from "./metrics";
import type { ListenerTls } from "./tls-config";

export const METRICS_SETTING = "KEYCAP_METRICS_LISTEN";

export interface RunningMetricsServer {
  /** The bound address (the real port when 0 was asked for). */
  address: HostPort;
  close(): Promise<void>;
}

/**
 * Serves `GET /metrics` over HTTPS when `tls` is given (the listener certificate; client
 * certificates as the listener's KEYCAP_METRICS_CLIENT_AUTH says), else plain HTTP, which the
 * configuration allows on loopback only (tls-config.ts).
 */
export async function startMetricsServer(address: HostPort, metrics: Metrics, logger: Logger, tls?: ListenerTls): Promise<RunningMetricsServer> {
  const handler: http.RequestListener = (req, res) => {
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
  };
  const server = tls
    ? https.createServer(
        {
          cert: fs.readFileSync(tls.certFile),
          key: fs.readFileSync(tls.keyFile),
          ...(tls.clientAuth !== "none" && tls.clientCaFile
            ? { ca: fs.readFileSync(tls.clientCaFile), requestCert: true, rejectUnauthorized: tls.clientAuth === "require" }
            : {}),
        },
        handler,
      )
    : http.createServer(handler);
  // A scraper holding idle keep-alive connections must not delay a shutdown.
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", (err: NodeJS.ErrnoException) => reject(bindError(address, err)));
    server.listen(address.port, address.host, () => resolve());
  });
  const bound = { host: address.host, port: (server.address() as AddressInfo).port };
  logger.info({ listener: "metrics", address: formatHostPort(bound), transport: tls ? "tls" : "plaintext" }, "serving metrics");
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
