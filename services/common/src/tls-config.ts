/**
 * The transport-security settings (DESIGN §9): TLS per listener, which listeners ask
 * for client certificates, how certificates map to principals, and the CA a service
 * trusts when it dials a peer. Parsed and validated with the rest of the configuration,
 * so a bad value stops the start with one line naming the setting.
 */
import * as path from "node:path";
import { ConfigError, type HostPort } from "./config";

/** Whether a listener asks for client certificates. */
export type ClientAuth = "none" | "optional" | "require";

/** TLS of one listener; undefined cert means plaintext. */
export interface ListenerTls {
  certFile: string;
  keyFile: string;
  clientAuth: ClientAuth;
  /** CA that signs acceptable client certificates (required unless clientAuth is none). */
  clientCaFile: string | undefined;
}

/** Everything transport-related, defaults applied. */
export interface TlsSettings {
  kernel: ListenerTls | undefined;
  ledger: ListenerTls | undefined;
  admin: ListenerTls | undefined;
  gateway: ListenerTls | undefined;
  /** The Prometheus endpoint's TLS (HTTPS); plaintext is allowed on loopback only, like every listener. */
  metrics: ListenerTls | undefined;
  /** CA pinned when this service dials a peer (ledger → kernel keys, kernel → ledger lookups). */
  peerCaFile: string | undefined;
  /** Client certificate this service presents when it dials a peer. */
  peerClientCertFile: string | undefined;
  peerClientKeyFile: string | undefined;
  /** Certificate identity (URI SAN, or "CN=<name>") → principal name. */
  certPrincipals: ReadonlyMap<string, string>;
  /** KEYCAP_ALLOW_PLAINTEXT=1: plaintext listeners off loopback are allowed. */
  allowPlaintext: boolean;
}

type Env = Readonly<Record<string, string | undefined>>;

function str(env: Env, name: string): string | undefined {
  const v = env[name];
  return v === undefined || v.trim() === "" ? undefined : v.trim();
}

function file(env: Env, name: string): string | undefined {
  const v = str(env, name);
  return v === undefined ? undefined : path.resolve(v);
}

const CLIENT_AUTH: readonly ClientAuth[] = ["none", "optional", "require"];

function listenerTls(env: Env, prefix: "KERNEL" | "LEDGER" | "ADMIN" | "GATEWAY" | "METRICS"): ListenerTls | undefined {
  const certSetting = `KEYCAP_${prefix}_TLS_CERT_FILE`;
  const keySetting = `KEYCAP_${prefix}_TLS_KEY_FILE`;
  const certFile = file(env, certSetting) ?? file(env, "KEYCAP_TLS_CERT_FILE");
  const keyFile = file(env, keySetting) ?? file(env, "KEYCAP_TLS_KEY_FILE");
  const authSetting = `KEYCAP_${prefix}_CLIENT_AUTH`;
  const clientAuth = (str(env, authSetting) ?? "none") as ClientAuth;
  if (!CLIENT_AUTH.includes(clientAuth)) throw new ConfigError(authSetting, `expected none, optional or require, got ${JSON.stringify(clientAuth)}`);
  if ((certFile === undefined) !== (keyFile === undefined)) {
    throw new ConfigError(certFile === undefined ? "KEYCAP_TLS_CERT_FILE" : "KEYCAP_TLS_KEY_FILE", "TLS needs both a certificate file and a key file");
  }
  if (certFile === undefined || keyFile === undefined) {
    if (clientAuth !== "none") throw new ConfigError(authSetting, "client certificates need TLS: set KEYCAP_TLS_CERT_FILE and KEYCAP_TLS_KEY_FILE");
    return undefined;
  }
  const clientCaFile = file(env, "KEYCAP_TLS_CLIENT_CA_FILE");
  if (clientAuth !== "none" && clientCaFile === undefined) {
    throw new ConfigError(authSetting, `${clientAuth} client certificates need KEYCAP_TLS_CLIENT_CA_FILE (the CA that signs them)`);
  }
  return { certFile, keyFile, clientAuth, clientCaFile };
}

/** Parses KEYCAP_CERT_PRINCIPALS: a JSON object `{ "<identity>": "<principal>" }`. */
function certPrincipals(env: Env): Map<string, string> {
  const raw = str(env, "KEYCAP_CERT_PRINCIPALS");
  const out = new Map<string, string>();
  if (raw === undefined) return out;
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw new ConfigError("KEYCAP_CERT_PRINCIPALS", 'expected a JSON object like {"spiffe://example.org/runtime/a":"team-a","CN=runner-b":"team-b"}');
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
    throw new ConfigError("KEYCAP_CERT_PRINCIPALS", "expected a JSON object of identity → principal name");
  for (const [identity, principal] of Object.entries(parsed)) {
    if (typeof principal !== "string" || !/^[A-Za-z0-9._-]{1,64}$/.test(principal)) {
      throw new ConfigError("KEYCAP_CERT_PRINCIPALS", `the principal for ${JSON.stringify(identity)} must be a name of 1-64 [A-Za-z0-9._-]`);
    }
    if (!/^[a-z][a-z0-9+.-]*:\S+$/i.test(identity) && !/^CN=.+$/.test(identity)) {
      throw new ConfigError("KEYCAP_CERT_PRINCIPALS", `identity ${JSON.stringify(identity)} must be a URI SAN (e.g. spiffe://td/path) or CN=<common name>`);
    }
    out.set(identity, principal);
  }
  return out;
}

/** True for addresses only this machine can reach. */
export function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || /^127(\.\d{1,3}){3}$/.test(host);
}

/** Reads the TLS settings and checks them against the listen and dial addresses. */
export function loadTlsSettings(
  env: Env,
  addresses: {
    kernelListen: HostPort;
    ledgerListen: HostPort;
    adminListen: HostPort;
    ledgerAddress: HostPort;
    gatewayListen?: HostPort | undefined;
    metricsListen?: HostPort | undefined;
  },
): TlsSettings {
  const allowPlaintext = str(env, "KEYCAP_ALLOW_PLAINTEXT") === "1";
  const settings: TlsSettings = {
    kernel: listenerTls(env, "KERNEL"),
    ledger: listenerTls(env, "LEDGER"),
    admin: listenerTls(env, "ADMIN"),
    gateway: listenerTls(env, "GATEWAY"),
    metrics: listenerTls(env, "METRICS"),
    peerCaFile: file(env, "KEYCAP_TLS_CA_FILE"),
    peerClientCertFile: file(env, "KEYCAP_TLS_CLIENT_CERT_FILE"),
    peerClientKeyFile: file(env, "KEYCAP_TLS_CLIENT_KEY_FILE"),
    certPrincipals: certPrincipals(env),
    allowPlaintext,
  };
  if ((settings.peerClientCertFile === undefined) !== (settings.peerClientKeyFile === undefined)) {
    throw new ConfigError("KEYCAP_TLS_CLIENT_CERT_FILE", "a client certificate needs both KEYCAP_TLS_CLIENT_CERT_FILE and KEYCAP_TLS_CLIENT_KEY_FILE");
  }
  if (!allowPlaintext) {
    const listeners: [string, HostPort, ListenerTls | undefined][] = [
      ["KEYCAP_KERNEL_LISTEN", addresses.kernelListen, settings.kernel],
      ["KEYCAP_LEDGER_LISTEN", addresses.ledgerListen, settings.ledger],
      ["KEYCAP_ADMIN_LISTEN", addresses.adminListen, settings.admin],
      ...(addresses.gatewayListen ? [["KEYCAP_GATEWAY_LISTEN", addresses.gatewayListen, settings.gateway] as [string, HostPort, ListenerTls | undefined]] : []),
      ...(addresses.metricsListen ? [["KEYCAP_METRICS_LISTEN", addresses.metricsListen, settings.metrics] as [string, HostPort, ListenerTls | undefined]] : []),
    ];
    for (const [setting, a, tls] of listeners) {
      if (!tls && !isLoopback(a.host)) {
        throw new ConfigError(
          setting,
          `${a.host} is not a loopback address and the listener has no TLS: set KEYCAP_TLS_CERT_FILE and KEYCAP_TLS_KEY_FILE (or KEYCAP_ALLOW_PLAINTEXT=1 behind a TLS-terminating proxy)`,
        );
      }
    }
    if (settings.peerCaFile === undefined && !isLoopback(addresses.ledgerAddress.host)) {
      throw new ConfigError(
        "KEYCAP_LEDGER_ADDRESS",
        `${addresses.ledgerAddress.host} is not loopback: set KEYCAP_TLS_CA_FILE to dial the ledger over TLS (or KEYCAP_ALLOW_PLAINTEXT=1)`,
      );
    }
  }
  return settings;
}
