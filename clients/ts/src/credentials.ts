/**
 * How a client proves who it is and whom it talks to: a runtime's bearer secret
 * for the kernel, and TLS (a CA to verify the server, a client certificate where
 * the listener asks for one).
 *
 * The bearer secret's default lookup is the same in every keycap client
 * (TypeScript, Python, Go): KEYCAP_RUNTIME_TOKEN, else the file named by
 * KEYCAP_RUNTIME_TOKEN_FILE, else `$KEYCAP_DATA_DIR/runtime-token` (data dir
 * default: the nearest `.keycap` folder in the working directory or above it, up to the
 * filesystem's root; a file named `.keycap` is skipped), which `make run` creates on first
 * start. An empty secret is none. A refusal for a missing credential says where the lookup
 * looked (missingCredentialHint).
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
 * What the default lookup (module comment) found: the secret and where it was read, or
 * nothing and every place it looked, in order, so that an error can say where to put one.
 */
export interface RuntimeTokenLookup {
  /** The secret, trimmed; undefined when the lookup found none (an empty file is none). */
  token: string | undefined;
  /** Where the secret came from: "KEYCAP_RUNTIME_TOKEN" or the file read; undefined when none was found. */
  source: string | undefined;
  /** Each place looked at, for people, e.g. "KEYCAP_RUNTIME_TOKEN (not set)", "/work/app/.keycap/runtime-token (no such file)". */
  tried: string[];
}

/**
 * The default lookup with its trail (module comment). `cwd` is where the search for a
 * `.keycap` folder starts.
 *
 * @throws ClientConfigError when KEYCAP_RUNTIME_TOKEN_FILE is set and cannot be read.
 */
export function lookupRuntimeToken(env: Env = process.env, cwd: string = process.cwd()): RuntimeTokenLookup {
  const direct = nonEmpty(env["KEYCAP_RUNTIME_TOKEN"]);
  if (direct !== undefined) return { token: direct, source: "KEYCAP_RUNTIME_TOKEN", tried: [] };
  const tried = ["KEYCAP_RUNTIME_TOKEN (not set)"];
  const explicit = nonEmpty(env["KEYCAP_RUNTIME_TOKEN_FILE"]);
  if (explicit === undefined) tried.push("KEYCAP_RUNTIME_TOKEN_FILE (not set)");
  const dataDir = nonEmpty(env["KEYCAP_DATA_DIR"]);
  if (explicit === undefined) tried.push(...dataDirTrail(dataDir, cwd));
  const file = explicit !== undefined ? path.resolve(cwd, explicit) : path.join(defaultDataDir(env, cwd), "runtime-token");
  try {
    const token = fs.readFileSync(file, "utf8").trim();
    if (token !== "") return { token, source: file, tried };
    tried.push(`${file} (empty)`);
    return { token: undefined, source: undefined, tried };
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (explicit === undefined && code === "ENOENT") return { token: undefined, source: undefined, tried: [...tried, `${file} (no such file)`] };
    throw new ClientConfigError("KEYCAP_RUNTIME_TOKEN_FILE", `cannot read ${file} (${code ?? "unknown error"})`);
  }
}

/** How the data directory was chosen, for the trail: the setting, or each folder searched for `.keycap`. */
function dataDirTrail(configured: string | undefined, cwd: string): string[] {
  if (configured !== undefined) return [`KEYCAP_DATA_DIR=${configured}`];
  const searched: string[] = [];
  for (let dir = path.resolve(cwd); ; dir = path.dirname(dir)) {
    searched.push(dir);
    if (isDirectory(path.join(dir, ".keycap")))
      return [`KEYCAP_DATA_DIR (not set)`, `a .keycap folder in ${searched.join(", ")} (found ${path.join(dir, ".keycap")})`];
    if (path.dirname(dir) === dir) return [`KEYCAP_DATA_DIR (not set)`, `a .keycap folder in ${searched.join(", ")} (none)`];
  }
}

/**
 * The runtime's bearer secret by the default lookup (module comment), or
 * undefined when none is configured and the default file does not exist.
 *
 * @throws ClientConfigError when KEYCAP_RUNTIME_TOKEN_FILE is set and cannot be read.
 */
export function runtimeTokenFromEnv(env: Env = process.env, cwd: string = process.cwd()): string | undefined {
  return lookupRuntimeToken(env, cwd).token;
}

/**
 * What to add to a PRINCIPAL_CREDENTIAL_MISSING refusal of a call sent without a bearer:
 * where the default lookup looked (now) and which settings would supply a credential.
 */
export function missingCredentialHint(env: Env = process.env, cwd: string = process.cwd()): string {
  let found: RuntimeTokenLookup;
  try {
    found = lookupRuntimeToken(env, cwd);
  } catch (err) {
    return `this client sent no runtime credential, and the default lookup fails: ${(err as Error).message}`;
  }
  if (found.token !== undefined) {
    return `this client sent no runtime credential, though the default lookup finds one now (${found.source}): the client was made with token "" or before it existed`;
  }
  return (
    `this client sent no runtime credential; the default lookup tried ${found.tried.join("; ")}. ` +
    "Run `make run` (or `keycap serve`) in this folder or one above it, which writes .keycap/runtime-token, " +
    "or set KEYCAP_RUNTIME_TOKEN, KEYCAP_RUNTIME_TOKEN_FILE or KEYCAP_DATA_DIR, or pass the client's token option"
  );
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
