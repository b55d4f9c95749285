import * as fs from "node:fs";
import * as path from "node:path";
import type { Command } from "commander";
import { AdminClient, channelCredentials, KeycapClientError, runtimeTokenFromEnv, tlsFromEnv, type TlsOptions } from "../../../clients/ts/src";

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
  if ((certFile === undefined) !== (keyFile === undefined)) throw new OperatorError("--cert and --key go together");
  return { ...(caFile ? { caFile } : {}), ...(certFile ? { certFile } : {}), ...(keyFile ? { keyFile } : {}) };
}

/** The runtime credential for `recover`: --runtime-token-file, else the clients' default lookup. */
export function runtimeToken(opts: { runtimeTokenFile?: string }): string {
  if (opts.runtimeTokenFile !== undefined) {
    try {
      return fs.readFileSync(opts.runtimeTokenFile, "utf8").trim();
    } catch {
      throw new OperatorError(`--runtime-token-file: cannot read ${opts.runtimeTokenFile}`);
    }
  }
  const token = runtimeTokenFromEnv();
  if (token === undefined)
    throw new OperatorError(
      "no runtime credential: set KEYCAP_RUNTIME_TOKEN, KEYCAP_RUNTIME_TOKEN_FILE or pass --runtime-token-file (make run creates $KEYCAP_DATA_DIR/runtime-token)",
    );
  return token;
}

/**
 * The operator credential: KEYCAP_ADMIN_TOKEN, else --token-file / KEYCAP_ADMIN_TOKEN_FILE,
 * else the data dir's admin-token. The ledger admin API takes the admin token; the kernel
 * takes it too (the built-in operator "admin") or an operator principal's secret.
 */
export function adminToken(opts: OperatorOptions): string {
  const fromEnv = process.env["KEYCAP_ADMIN_TOKEN"]?.trim();
  if (fromEnv && !opts.tokenFile) return fromEnv;
  const file = opts.tokenFile ?? process.env["KEYCAP_ADMIN_TOKEN_FILE"] ?? path.join(path.resolve(process.env["KEYCAP_DATA_DIR"] ?? ".keycap"), "admin-token");
  try {
    return fs.readFileSync(file, "utf8").trim();
  } catch {
    throw new OperatorError(`no admin credential: set KEYCAP_ADMIN_TOKEN or pass --token-file (tried ${file})`);
  }
}

export function adminAddress(opts: OperatorOptions): string {
  return opts.admin ?? process.env["KEYCAP_ADMIN_ADDRESS"] ?? process.env["KEYCAP_ADMIN_LISTEN"] ?? "127.0.0.1:50053";
}

export function kernelAddress(opts: OperatorOptions): string {
  return opts.kernel ?? process.env["KEYCAP_KERNEL_ADDRESS"] ?? process.env["KEYCAP_KERNEL_LISTEN"] ?? "127.0.0.1:50051";
}

export function ledgerAddress(opts: OperatorOptions): string {
  return opts.ledger ?? process.env["KEYCAP_LEDGER_ADDRESS"] ?? process.env["KEYCAP_LEDGER_LISTEN"] ?? "127.0.0.1:50052";
}

/** An error the CLI prints as one line before exiting non-zero. */
export class OperatorError extends Error {}

/** Turns a client error into the one line an operator needs. */
export function explain(err: unknown, what: string, address: string): OperatorError {
  if (err instanceof OperatorError) return err;
  const e = KeycapClientError.from(err);
  if (e.codeName === "UNAVAILABLE" || e.codeName === "DEADLINE_EXCEEDED")
    return new OperatorError(`cannot reach the ${what} at ${address} (${e.codeName}: ${e.message})`);
  if (e.codeName === "UNAUTHENTICATED") return new OperatorError(`the ${what} at ${address} refused the credential (${e.reason})`);
  if (e.codeName === "PERMISSION_DENIED") return new OperatorError(`the ${what} at ${address} refused: ${e.reason}: ${e.message}`);
  return new OperatorError(`${what} at ${address}: ${e.codeName} ${e.reason}: ${e.message}`);
}

export async function withAdmin<T>(opts: OperatorOptions, fn: (admin: AdminClient) => Promise<T>): Promise<T> {
  const address = adminAddress(opts);
  const admin = new AdminClient(address, adminToken(opts), channelCredentials(tlsOptions(opts)));
  try {
    return await fn(admin);
  } catch (err) {
    throw explain(err, "ledger admin API", address);
  } finally {
    admin.close();
  }
}
