import * as fs from "node:fs";
import * as path from "node:path";
import { AdminClient, KeycapClientError } from "../../../clients/ts/src";

/** Options every operator command accepts. */
export interface OperatorOptions {
  admin?: string;
  kernel?: string;
  ledger?: string;
  tokenFile?: string;
  json?: boolean;
}

/** The admin credential: KEYCAP_ADMIN_TOKEN, else --token-file / KEYCAP_ADMIN_TOKEN_FILE, else the data dir's. */
export function adminToken(opts: OperatorOptions): string {
  const fromEnv = process.env["KEYCAP_ADMIN_TOKEN"]?.trim();
  if (fromEnv && !opts.tokenFile) return fromEnv;
  const file =
    opts.tokenFile ??
    process.env["KEYCAP_ADMIN_TOKEN_FILE"] ??
    path.join(path.resolve(process.env["KEYCAP_DATA_DIR"] ?? ".keycap"), "admin-token");
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
  if (e.codeName === "UNAVAILABLE" || e.codeName === "DEADLINE_EXCEEDED") return new OperatorError(`cannot reach the ${what} at ${address} (${e.codeName})`);
  if (e.codeName === "UNAUTHENTICATED") return new OperatorError(`the ${what} at ${address} refused the credential (${e.reason})`);
  return new OperatorError(`${what} at ${address}: ${e.codeName} ${e.reason}: ${e.message}`);
}

export async function withAdmin<T>(opts: OperatorOptions, fn: (admin: AdminClient) => Promise<T>): Promise<T> {
  const address = adminAddress(opts);
  const admin = new AdminClient(address, adminToken(opts));
  try {
    return await fn(admin);
  } catch (err) {
    throw explain(err, "ledger admin API", address);
  } finally {
    admin.close();
  }
}
