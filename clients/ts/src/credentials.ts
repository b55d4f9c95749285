/**
 * How a client proves who it is and whom it talks to: a runtime's bearer secret
 * for the kernel, and TLS (a CA to verify the server, a client certificate where
 * the listener asks for one).
 *
 * The bearer secret's default lookup is the same in every keycap client
 * (TypeScript, Python, Go): KEYCAP_RUNTIME_TOKEN, else the file named by
 * KEYCAP_RUNTIME_TOKEN_FILE, else `$KEYCAP_DATA_DIR/runtime-token` (data dir
 * default: the nearest `.keycap` folder here or above), which `make run` creates on first start.
 */
import { credentials, type ChannelCredentials } from "@grpc/grpc-js";
import * as fs from "node:fs";
import * as path from "node:path";

/** TLS material for a client channel. Files are read once, when the client is made. */
export interface TlsOptions {
  /** PEM CA bundle that signs the server's certificate. Pinned: the system roots are not used. */
  caFile?: string;
  /** PEM client certificate chain, for listeners that require one (mTLS). */
  certFile?: string;
  /** PEM private key of certFile. */
  keyFile?: string;
}

/** A TLS-related setting that cannot be used; the message names it. */
export class ClientConfigError extends Error {
  constructor(
    readonly setting: string,
    problem: string,
  ) {
    super(`${setting}: ${problem}`);
    this.name = "ClientConfigError";
  }
}

function readPem(setting: string, file: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (err) {
    const code = (err as { code?: string }).code ?? "unknown error";
    throw new ClientConfigError(setting, `cannot read ${file} (${code})`);
  }
}

/**
 * Channel credentials for TLS. Without `caFile` the system roots verify the
 * server. A client certificate needs both certFile and keyFile.
 */
export function tlsCredentials(tls: TlsOptions): ChannelCredentials {
  if ((tls.certFile === undefined) !== (tls.keyFile === undefined)) {
    throw new ClientConfigError(tls.certFile === undefined ? "certFile" : "keyFile", "a client certificate needs both certFile and keyFile");
  }
  const ca = tls.caFile !== undefined ? readPem("caFile", tls.caFile) : null;
  const key = tls.keyFile !== undefined ? readPem("keyFile", tls.keyFile) : null;
  const cert = tls.certFile !== undefined ? readPem("certFile", tls.certFile) : null;
  return credentials.createSsl(ca, key, cert);
}

/** Channel credentials: TLS when `tls` is given, else plaintext (for loopback). */
export function channelCredentials(tls: TlsOptions | undefined): ChannelCredentials {
  return tls ? tlsCredentials(tls) : credentials.createInsecure();
}

type Env = Readonly<Record<string, string | undefined>>;

function nonEmpty(v: string | undefined): string | undefined {
  return v === undefined || v.trim() === "" ? undefined : v.trim();
}

/**
 * The data directory, as the services resolve it: KEYCAP_DATA_DIR, else the nearest
 * `.keycap` folder in `cwd` or above it (so a client run from a subfolder finds the
 * credentials `make run` made at the top), else `cwd/.keycap`.
 */
export function defaultDataDir(env: Env = process.env, cwd: string = process.cwd()): string {
  const configured = nonEmpty(env["KEYCAP_DATA_DIR"]);
  if (configured !== undefined) return path.resolve(cwd, configured);
  for (let dir = path.resolve(cwd); ; dir = path.dirname(dir)) {
    const candidate = path.join(dir, ".keycap");
    if (isDirectory(candidate)) return candidate;
    if (path.dirname(dir) === dir) return path.join(path.resolve(cwd), ".keycap");
  }
}

function isDirectory(p: string): boolean {
  try {
    return fs.statSync(p).isDirectory();
  } catch {
    return false;
  }
}

/**
 * The runtime's bearer secret by the default lookup (module comment), or
 * undefined when none is configured and the default file does not exist.
 *
 * @throws ClientConfigError when KEYCAP_RUNTIME_TOKEN_FILE is set and cannot be read.
 */
export function runtimeTokenFromEnv(env: Env = process.env): string | undefined {
  const direct = nonEmpty(env["KEYCAP_RUNTIME_TOKEN"]);
  if (direct !== undefined) return direct;
  const explicit = nonEmpty(env["KEYCAP_RUNTIME_TOKEN_FILE"]);
  const file = explicit ?? path.join(defaultDataDir(env), "runtime-token");
  try {
    return fs.readFileSync(file, "utf8").trim();
  } catch (err) {
    if (explicit === undefined && (err as { code?: string }).code === "ENOENT") return undefined;
    throw new ClientConfigError("KEYCAP_RUNTIME_TOKEN_FILE", `cannot read ${file} (${(err as { code?: string }).code ?? "unknown error"})`);
  }
}

/**
 * TLS options from the environment: KEYCAP_TLS_CA_FILE, KEYCAP_TLS_CLIENT_CERT_FILE,
 * KEYCAP_TLS_CLIENT_KEY_FILE. Undefined when none is set (plaintext).
 */
export function tlsFromEnv(env: Env = process.env): TlsOptions | undefined {
  const caFile = nonEmpty(env["KEYCAP_TLS_CA_FILE"]);
  const certFile = nonEmpty(env["KEYCAP_TLS_CLIENT_CERT_FILE"]);
  const keyFile = nonEmpty(env["KEYCAP_TLS_CLIENT_KEY_FILE"]);
  if (caFile === undefined && certFile === undefined && keyFile === undefined) return undefined;
  return { ...(caFile ? { caFile } : {}), ...(certFile ? { certFile } : {}), ...(keyFile ? { keyFile } : {}) };
}
