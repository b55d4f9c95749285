import * as fs from "node:fs";
import * as path from "node:path";
import type { Command } from "commander";
import {
  AdminClient,
  KernelClient,
  channelCredentials,
  ClientConfigError,
  KeycapClientError,
  lookupRuntimeToken,
  missingCredentialHint,
  tlsFromEnv,
  type TlsOptions,
} from "../../../clients/ts/src";
import { resolveDataDir } from "../../common/src/data-dir";
import { EXIT } from "./exit-status";

/** Options every operator command accepts. */
export interface OperatorOptions {
  admin?: string;
  kernel?: string;
  ledger?: string;
  tokenFile?: string;
  json?: boolean;
  ca?: string;
  cert?: string;
  key?: string;
}

/** --ca / --cert / --key: TLS to the services (env KEYCAP_TLS_CA_FILE, KEYCAP_TLS_CLIENT_CERT_FILE, KEYCAP_TLS_CLIENT_KEY_FILE). */
export function withTlsOptions(c: Command): Command {
  return c
    .option("--ca <file>", "PEM CA that signs the services' certificates: use TLS (env KEYCAP_TLS_CA_FILE)")
    .option("--cert <file>", "PEM client certificate, where a listener requires one (env KEYCAP_TLS_CLIENT_CERT_FILE)")
    .option("--key <file>", "PEM key of --cert (env KEYCAP_TLS_CLIENT_KEY_FILE)");
}

/** TLS from the options, else the environment; undefined is plaintext (loopback). */
export function tlsOptions(opts: OperatorOptions): TlsOptions | undefined {
  const env = tlsFromEnv();
  const caFile = opts.ca ?? env?.caFile;
  const certFile = opts.cert ?? env?.certFile;
  const keyFile = opts.key ?? env?.keyFile;
  if (caFile === undefined && certFile === undefined && keyFile === undefined) return undefined;
  if ((certFile === undefined) !== (keyFile === undefined)) throw new UsageError("--cert and --key go together");
  return { ...(caFile ? { caFile } : {}), ...(certFile ? { certFile } : {}), ...(keyFile ? { keyFile } : {}) };
}

/** The runtime credential for `recover`: --runtime-token-file, else the clients' default lookup. */
export function runtimeToken(opts: { runtimeTokenFile?: string }): string {
  if (opts.runtimeTokenFile !== undefined) {
    try {
      const token = fs.readFileSync(opts.runtimeTokenFile, "utf8").trim();
      noteRuntimeSource(`--runtime-token-file ${opts.runtimeTokenFile}`);
      return token;
    } catch {
      throw new OperatorError(`--runtime-token-file: cannot read ${opts.runtimeTokenFile}`);
    }
  }
  const found = lookupRuntimeToken();
  if (found.token === undefined) throw new OperatorError(`no runtime credential: ${missingCredentialHint()}; or pass --runtime-token-file`);
  noteRuntimeSource(found.source);
  return found.token;
}

/**
 * The operator credential: KEYCAP_ADMIN_TOKEN, else --token-file / KEYCAP_ADMIN_TOKEN_FILE,
 * else the data dir's admin-token (the data dir found as the services find it). The ledger
 * admin API takes the admin token; the kernel takes it too (the built-in operator "admin")
 * or an operator principal's secret.
 */
export function adminToken(opts: OperatorOptions): string {
  const fromEnv = process.env["KEYCAP_ADMIN_TOKEN"]?.trim();
  if (fromEnv && !opts.tokenFile) {
    credentialSource = "KEYCAP_ADMIN_TOKEN";
    return fromEnv;
  }
  const setting = opts.tokenFile !== undefined ? "--token-file " : process.env["KEYCAP_ADMIN_TOKEN_FILE"] !== undefined ? "KEYCAP_ADMIN_TOKEN_FILE=" : "";
  const file = opts.tokenFile ?? process.env["KEYCAP_ADMIN_TOKEN_FILE"] ?? path.join(resolveDataDir(process.env["KEYCAP_DATA_DIR"]), "admin-token");
  try {
    const token = fs.readFileSync(file, "utf8").trim();
    credentialSource = `${setting}${file}`;
    return token;
  } catch {
    throw new OperatorError(`no admin credential: set KEYCAP_ADMIN_TOKEN or pass --token-file (tried ${file})`);
  }
}

/** Where this command's credential was read from, so a refusal of it can say which one to fix. */
let credentialSource: string | undefined;

/** The runtime credential's source (recover), for the same purpose. */
function noteRuntimeSource(source: string | undefined): void {
  credentialSource = source;
}

/** A refused credential: which one it was, and what the fix is. */
function refusedCredential(what: string, at: Address, reason: string): string {
  const from = credentialSource ? `, read from ${credentialSource}` : "";
  const fix =
    reason === "PRINCIPAL_REVOKED"
      ? "that principal is revoked: create another (keycap principals create) and use its secret"
      : "it is not a credential of the keycap serve there: use the admin-token of that serve's data directory (its start banner names the file) or set KEYCAP_ADMIN_TOKEN / --token-file; a runtime's secret is a principal's (keycap principals list)";
  return `the ${what} at ${at.address} refused the credential (${reason})${from}; ${fix}`;
}

/** A service address and the setting it came from, so an error can say what to change. */
export interface Address {
  address: string;
  /** "--admin", "KEYCAP_ADMIN_ADDRESS", … or a sentence naming what would set it. */
  setting: string;
}

function address(flag: string, given: string | undefined, envNames: readonly string[], fallback: string): Address {
  if (given !== undefined) return { address: given, setting: flag };
  for (const name of envNames) {
    const v = process.env[name]?.trim();
    if (v) return { address: v, setting: name };
  }
  return { address: fallback, setting: `the default; set ${flag} or ${envNames[0]}` };
}

export function adminAddress(opts: OperatorOptions): Address {
  return address("--admin", opts.admin, ["KEYCAP_ADMIN_ADDRESS", "KEYCAP_ADMIN_LISTEN"], "127.0.0.1:50053");
}

export function kernelAddress(opts: OperatorOptions): Address {
  return address("--kernel", opts.kernel, ["KEYCAP_KERNEL_ADDRESS", "KEYCAP_KERNEL_LISTEN"], "127.0.0.1:50051");
}

export function ledgerAddress(opts: OperatorOptions): Address {
  return address("--ledger", opts.ledger, ["KEYCAP_LEDGER_ADDRESS", "KEYCAP_LEDGER_LISTEN"], "127.0.0.1:50052");
}

/**
 * An error the CLI prints as one line before exiting with `exitCode` (exit-status.ts).
 * `code` and `reason` are the service's answer, when there was one, for --json output.
 */
export class OperatorError extends Error {
  constructor(
    message: string,
    readonly exitCode: number = EXIT.FAILURE,
    readonly code = "",
    readonly reason = "",
  ) {
    super(message);
    this.name = "OperatorError";
  }
}

/** The command line itself is wrong (a bad option value, a missing argument): exit 2. */
export class UsageError extends OperatorError {
  constructor(message: string) {
    super(message, EXIT.USAGE);
    this.name = "UsageError";
  }
}

/** What was asked for does not exist (an entry, a call, a principal): exit 3. */
export class NotFoundError extends OperatorError {
  constructor(message: string, reason = "NOT_FOUND") {
    super(message, EXIT.NOT_FOUND, "NOT_FOUND", reason);
    this.name = "NotFoundError";
  }
}

/**
 * Turns a client error into the one line an operator needs. A channel that never
 * connected is "cannot reach", naming the setting that chose the address; a service
 * that answered UNAVAILABLE with a reason of its own was reached and says why it
 * cannot serve.
 */
export function explain(err: unknown, what: string, at: Address): OperatorError {
  if (err instanceof OperatorError) return err;
  if (err instanceof ClientConfigError) return new UsageError(err.message);
  const e = KeycapClientError.from(err);
  const fail = (message: string): OperatorError => new OperatorError(message, EXIT.FAILURE, e.codeName, e.reason);
  const fromService = e.reason !== "" && e.reason !== e.codeName;
  if (e.codeName === "DEADLINE_EXCEEDED" && fromService) return fail(`the ${what} at ${at.address} stopped the query: ${e.message}`);
  if (e.codeName === "DEADLINE_EXCEEDED" && reachedButSilent(e))
    return fail(
      `the ${what} at ${at.address} was reached but did not answer before the deadline: it is running but busy or slow (a large database?); retry later, narrow the request, or check its log`,
    );
  if ((e.codeName === "UNAVAILABLE" || e.codeName === "DEADLINE_EXCEEDED") && !fromService)
    return fail(`cannot reach the ${what} at ${at.address} (setting ${at.setting}): ${unreachableCause(e)}`);
  if (e.codeName === "UNAVAILABLE") return fail(`the ${what} at ${at.address} cannot serve now, retry later: ${e.summary}`);
  if (e.codeName === "UNAUTHENTICATED") return fail(refusedCredential(what, at, e.reason));
  if (e.codeName === "PERMISSION_DENIED") return fail(`the ${what} at ${at.address} refused: ${e.reason}: ${e.message}`);
  if (e.codeName === "NOT_FOUND") return new NotFoundError(`${what} at ${at.address}: ${e.message || "not found"}`, e.reason);
  if (e.codeName === "INVALID_ARGUMENT") return new OperatorError(`${what} at ${at.address}: ${e.summary}`, EXIT.USAGE, e.codeName, e.reason);
  return fail(`${what} at ${at.address}: ${e.summary}`);
}

/**
 * grpc-js names the connection a timed-out call went out on (`remote_addr=`) only when it
 * was sent: the service was there and did not answer in time, which is not "unreachable".
 */
function reachedButSilent(e: KeycapClientError): boolean {
  return /remote_addr=/.test(`${e.message} ${String((e.cause as { details?: unknown } | undefined)?.details ?? "")}`);
}

/** Why a channel did not connect, in words (grpc-js's text is a trace of its pick states). */
function unreachableCause(e: KeycapClientError): string {
  const text = `${e.message} ${String((e.cause as { details?: unknown } | undefined)?.details ?? "")}`;
  if (/ECONNREFUSED/.test(text)) return "nothing is listening there; is keycap serve running, and is this its address?";
  if (/ENOTFOUND|EAI_AGAIN|name resolution failed/i.test(text)) return "the host name does not resolve";
  if (e.codeName === "DEADLINE_EXCEEDED") return "no answer before the deadline; is keycap serve running, and is this its address?";
  return e.message;
}

export async function withAdmin<T>(opts: OperatorOptions, fn: (admin: AdminClient) => Promise<T>): Promise<T> {
  const at = adminAddress(opts);
  let admin: AdminClient | undefined;
  try {
    admin = new AdminClient(at.address, adminToken(opts), channelCredentials(tlsOptions(opts)));
    return await fn(admin);
  } catch (err) {
    throw explain(err, "ledger admin API", at);
  } finally {
    admin?.close();
  }
}

/** Runs `use` with a kernel client as the operator; a failure is explained with the kernel's address and setting. */
export async function withOperatorKernel<T>(o: OperatorOptions, use: (kernel: KernelClient) => Promise<T>): Promise<T> {
  const at = kernelAddress(o);
  const tls = tlsOptions(o);
  const kernel = new KernelClient(at.address, { token: adminToken(o), ...(tls ? { tls } : {}) });
  try {
    return await use(kernel);
  } catch (err) {
    throw explain(err, "kernel", at);
  } finally {
    kernel.close();
  }
}
