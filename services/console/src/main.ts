/**
 * The web console's entry point: a starter for `keycap serve all` (when
 * KEYCAP_CONSOLE_LISTEN is set) and the standalone `keycap console`. It holds no data of
 * its own: every page is read from the ledger admin API and the kernel with the signed-in
 * operator's admin credential, so it needs no MongoDB.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { AddressInfo } from "node:net";
import { ConfigError, formatHostPort, loadConfig, parseHostPort, type HostPort, type KeycapConfig } from "../../common/src/config";
import { createLogger, type Logger } from "../../common/src/logger";
import { projectRoot } from "../../common/src/repo-paths";
import type { RunningService, ServiceDeps } from "../../common/src/service-runner";
import { isLoopback } from "../../common/src/tls-config";
import { peerChannelCredentials } from "../../common/src/tls";
import { ConsoleServer, loadStylesheet } from "./console-server";

export const CONSOLE_STYLESHEET = path.join(projectRoot(), "services", "console", "assets", "console.css");

/** `keycap console` listens here when KEYCAP_CONSOLE_LISTEN is unset. */
export const DEFAULT_CONSOLE_LISTEN = "127.0.0.1:50054";

function dialable(a: HostPort): string {
  return formatHostPort(a.host === "0.0.0.0" || a.host === "::" ? { host: "127.0.0.1", port: a.port } : a);
}

function readTls(config: KeycapConfig): { cert: Buffer; key: Buffer } | undefined {
  // The console is the admin side's web face: it serves TLS exactly when the admin listener does.
  const t = config.tls.admin;
  if (t === undefined) return undefined;
  const read = (setting: string, file: string): Buffer => {
    try {
      return fs.readFileSync(file);
    } catch (err) {
      throw new ConfigError(setting, `${file} cannot be read (${(err as { code?: string }).code ?? "unknown error"})`);
    }
  };
  return { cert: read("KEYCAP_ADMIN_TLS_CERT_FILE", t.certFile), key: read("KEYCAP_ADMIN_TLS_KEY_FILE", t.keyFile) };
}

/** Starts the console on `listen`; the returned service stops it. */
export async function startConsoleOn(config: KeycapConfig, logger: Logger, listen: HostPort): Promise<RunningService> {
  const log = logger.child({ component: "console" });
  const tls = readTls(config);
  if (!tls && !isLoopback(listen.host) && !config.tls.allowPlaintext) {
    throw new ConfigError(
      "KEYCAP_CONSOLE_LISTEN",
      `${listen.host} is not loopback: the console carries the admin credential, so it needs TLS (KEYCAP_ADMIN_TLS_CERT_FILE/KEY_FILE or KEYCAP_TLS_CERT_FILE/KEY_FILE), or KEYCAP_ALLOW_PLAINTEXT=1`,
    );
  }
  const console = new ConsoleServer({
    addresses: { admin: () => dialable(config.adminAddress), kernel: () => dialable(config.kernelAddress) },
    channelCredentials: () => peerChannelCredentials(config.tls),
    logger: log,
    stylesheet: loadStylesheet(CONSOLE_STYLESHEET),
    ...(tls ? { tls } : {}),
  });
  await new Promise<void>((resolve, reject) => {
    console.server.once("error", (err: NodeJS.ErrnoException) =>
      reject(new ConfigError("KEYCAP_CONSOLE_LISTEN", `cannot listen on ${formatHostPort(listen)} (${err.code ?? err.message})`)),
    );
    console.server.listen(listen.port, listen.host, () => resolve());
  });
  const bound = console.server.address() as AddressInfo;
  const address = { host: listen.host, port: bound.port };
  log.info({ address: formatHostPort(address), transport: tls ? "tls" : "plaintext" }, "console listening");
  return {
    name: "console",
    listeners: [
      {
        name: "console",
        address,
        transport: tls ? "tls" : "plaintext",
        reloadTls: () => undefined,
        shutdown: async (graceMs) => {
          const closed = new Promise<void>((resolve) => console.server.close(() => resolve()));
          console.server.closeIdleConnections();
          const timer = setTimeout(() => console.server.closeAllConnections(), graceMs);
          await closed;
          clearTimeout(timer);
        },
      },
    ],
    stop: async (graceMs) => {
      const closed = new Promise<void>((resolve) => console.server.close(() => resolve()));
      console.server.closeIdleConnections();
      const timer = setTimeout(() => console.server.closeAllConnections(), graceMs);
      await closed;
      clearTimeout(timer);
      console.close();
    },
  };
}

/** The starter `keycap serve all` runs: a console only when KEYCAP_CONSOLE_LISTEN is set. */
export async function startConsoleIfConfigured(deps: ServiceDeps): Promise<RunningService> {
  if (deps.config.consoleListen === undefined) return { name: "console", listeners: [], stop: async () => undefined };
  return startConsoleOn(deps.config, deps.logger, deps.config.consoleListen);
}

/** `keycap console`: the console alone, in the foreground, beside services running elsewhere. */
export async function runConsole(): Promise<void> {
  let config: KeycapConfig;
  try {
    config = loadConfig();
  } catch (err) {
    process.stderr.write(`keycap: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(2);
  }
  const logger = createLogger("console", config.logLevel, config.logFormat);
  let service: RunningService;
  try {
    service = await startConsoleOn(config, logger, config.consoleListen ?? parseHostPort("KEYCAP_CONSOLE_LISTEN", DEFAULT_CONSOLE_LISTEN));
  } catch (err) {
    process.stderr.write(`keycap: ${err instanceof Error ? err.message.split("\n")[0] : String(err)}\n`);
    process.exit(2);
  }
  const l = service.listeners[0]!;
  const url = `${l.transport === "tls" ? "https" : "http"}://${formatHostPort(l.address)}/`;
  logger.info({ endpoints: [{ listener: "console", address: formatHostPort(l.address), transport: l.transport }] }, "ready");
  process.stderr.write(
    `\nkeycap console at ${url} (sign in with the admin credential)\n  ledger admin ${dialable(config.adminAddress)}, kernel ${dialable(config.kernelAddress)}\nPress Ctrl-C to stop.\n\n`,
  );
  const stop = (): void => {
    void service.stop(config.shutdownGraceMs).then(() => process.exit(0));
  };
  process.once("SIGTERM", stop);
  process.once("SIGINT", stop);
}
