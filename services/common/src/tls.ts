/**
 * TLS for keycap's listeners and peer connections, on Node's own TLS stack (through
 * grpc-js): no hand-written cryptography here, only which files to load and when.
 *
 * Listener credentials are reloadable: {@link ReloadableServerCredentials.reload}
 * re-reads the certificate, key and client CA (SIGHUP, like the signing keys) and swaps
 * them into the running server, so certificates rotate without a restart. A file that
 * does not load leaves the previous certificate in use.
 */
import { credentials, ServerCredentials, type ChannelCredentials } from "@grpc/grpc-js";
import * as fs from "node:fs";
import { createSecureContext, type PeerCertificate, type SecureContextOptions } from "node:tls";
import { ConfigError } from "./config";
import type { ListenerTls, TlsSettings } from "./tls-config";

function readFile(setting: string, file: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (err) {
    throw new ConfigError(setting, `${file} cannot be read (${(err as { code?: string }).code ?? "unknown error"})`);
  }
}

function contextOptions(tls: ListenerTls): SecureContextOptions {
  const options: SecureContextOptions = {
    cert: readFile("KEYCAP_TLS_CERT_FILE", tls.certFile),
    key: readFile("KEYCAP_TLS_KEY_FILE", tls.keyFile),
    ...(tls.clientCaFile !== undefined ? { ca: readFile("KEYCAP_TLS_CLIENT_CA_FILE", tls.clientCaFile) } : {}),
  };
  try {
    // Parses everything now, so a bad file is a configuration error, not a failed handshake later.
    createSecureContext(options);
  } catch (err) {
    throw new ConfigError(
      "KEYCAP_TLS_CERT_FILE",
      `${tls.certFile} / ${tls.keyFile} do not make a usable TLS identity (${err instanceof Error ? err.message : String(err)})`,
    );
  }
  return options;
}

/** Server credentials whose certificate can be swapped while serving. */
export class ReloadableServerCredentials extends ServerCredentials {
  constructor(private readonly tls: ListenerTls) {
    // requestCert asks for a client certificate; rejectUnauthorized refuses the handshake
    // without a valid one ("require"). With "optional" an unverified certificate is simply
    // not an identity: grpc-js reports a peer certificate only when it verified.
    super({ requestCert: tls.clientAuth !== "none", rejectUnauthorized: tls.clientAuth === "require", minVersion: "TLSv1.2" }, contextOptions(tls));
  }

  /** Re-reads the files and serves the new certificate to new connections. @throws ConfigError, keeping the old one. */
  reload(): void {
    this.updateSecureContextOptions(contextOptions(this.tls));
  }

  override _equals(other: ServerCredentials): boolean {
    return other === this;
  }
}

/** Listener credentials: TLS when configured, else plaintext. */
export function serverCredentials(tls: ListenerTls | undefined): ServerCredentials {
  return tls ? new ReloadableServerCredentials(tls) : ServerCredentials.createInsecure();
}

/**
 * Credentials for dialing a peer keycap service: TLS pinned to KEYCAP_TLS_CA_FILE (the
 * system roots are not trusted), presenting KEYCAP_TLS_CLIENT_CERT_FILE when set; else
 * plaintext (configuration only allows that on loopback).
 */
export function peerChannelCredentials(settings: TlsSettings): ChannelCredentials {
  if (settings.peerCaFile === undefined) return credentials.createInsecure();
  const ca = readFile("KEYCAP_TLS_CA_FILE", settings.peerCaFile);
  const cert = settings.peerClientCertFile !== undefined ? readFile("KEYCAP_TLS_CLIENT_CERT_FILE", settings.peerClientCertFile) : null;
  const key = settings.peerClientKeyFile !== undefined ? readFile("KEYCAP_TLS_CLIENT_KEY_FILE", settings.peerClientKeyFile) : null;
  return credentials.createSsl(ca, key, cert);
}

/**
 * The identities a verified client certificate offers, in the order they are tried:
 * its URI SANs (SPIFFE-style ids); only when it has none, "CN=<subject common name>".
 */
export function certificateIdentities(cert: PeerCertificate): string[] {
  const uris = (cert.subjectaltname ?? "")
    .split(/,\s*/)
    .filter((part) => part.startsWith("URI:"))
    .map((part) => part.slice(4));
  if (uris.length > 0) return uris;
  const cn = cert.subject?.CN;
  const name = Array.isArray(cn) ? cn[0] : cn;
  return typeof name === "string" && name !== "" ? [`CN=${name}`] : [];
}
