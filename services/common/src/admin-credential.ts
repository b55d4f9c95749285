/**
 * The admin credential: a bearer secret operators present to LedgerAdminService and, as
 * the built-in operator principal "admin", to the kernel (DESIGN §9).
 *
 * Source, first match wins: KEYCAP_ADMIN_TOKEN; else the file KEYCAP_ADMIN_TOKEN_FILE
 * (which must exist when set explicitly); else `$KEYCAP_DATA_DIR/admin-token`, generated
 * on first start (32 random bytes, base64url, mode 0600). Only the path is ever logged.
 */
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { open } from "node:fs/promises";
import { BearerSecret } from "./bearer-secret";
import { ConfigError } from "./config";
import { SecretFileWriteError, writeSecretFile } from "./secret-file";

/** Where the credential came from, for the start log. */
export type AdminCredentialSource = { kind: "env" } | { kind: "file"; path: string } | { kind: "generated"; path: string };

/** Outcome of checking a presented credential. */
export type AdminCheck = "ok" | "ADMIN_CREDENTIAL_MISSING" | "ADMIN_CREDENTIAL_INVALID";

/** The loaded credential. Holds only its SHA-256 digest (the log redactor holds the value). */
export class AdminCredential {
  private readonly secret: BearerSecret;

  private constructor(
    secret: string,
    readonly source: AdminCredentialSource,
  ) {
    this.secret = new BearerSecret(secret);
  }

  /**
   * Resolves the credential as the module comment describes.
   *
   * @param tokenFile the configured file (config.adminTokenFile).
   * @param defaultFile the generated default (`$KEYCAP_DATA_DIR/admin-token`); when
   *   tokenFile is anything else it was set explicitly and must exist.
   * @throws ConfigError naming the setting when the credential cannot be had.
   */
  static async resolve(envToken: string | undefined, tokenFile: string, defaultFile: string): Promise<AdminCredential> {
    if (envToken !== undefined) {
      if (!isUsable(envToken)) throw new ConfigError("KEYCAP_ADMIN_TOKEN", "must be printable ASCII without spaces");
      return new AdminCredential(envToken, { kind: "env" });
    }
    const existing = await readTokenFile(tokenFile);
    if (existing !== undefined) return new AdminCredential(existing, { kind: "file", path: tokenFile });
    if (tokenFile !== defaultFile) throw new ConfigError("KEYCAP_ADMIN_TOKEN_FILE", `${tokenFile} does not exist`);
    const created = await createTokenFile(tokenFile);
    if (created === undefined) {
      // Another ledger sharing the data dir created it first: use theirs.
      const theirs = await readTokenFile(tokenFile);
      if (theirs === undefined) throw new ConfigError("KEYCAP_ADMIN_TOKEN_FILE", `${tokenFile} was created concurrently and then removed`);
      return new AdminCredential(theirs, { kind: "file", path: tokenFile });
    }
    return new AdminCredential(created, { kind: "generated", path: tokenFile });
  }

  /** Builds a credential from a known secret (tests, embedding). */
  static fromSecret(secret: string): AdminCredential {
    return new AdminCredential(secret, { kind: "env" });
  }

  /** Whether a presented bearer token is the admin credential (constant time). */
  matches(token: string): boolean {
    return this.secret.matches(token);
  }

  /** Checks `authorization` metadata values (see {@link BearerSecret.check}). */
  check(authorization: string[]): AdminCheck {
    const checked = this.secret.check(authorization);
    return checked === "ok" ? "ok" : checked === "missing" ? "ADMIN_CREDENTIAL_MISSING" : "ADMIN_CREDENTIAL_INVALID";
  }
}

// What parseBearer accepts, so a configured token can actually be presented.
function isUsable(token: string): boolean {
  return /^[A-Za-z0-9\-._~+/]+=*$/.test(token);
}

async function readTokenFile(path: string): Promise<string | undefined> {
  let text: string;
  try {
    const fh = await open(path, "r");
    try {
      const st = await fh.stat();
      if (!st.isFile() || st.size > 4096) throw new ConfigError("KEYCAP_ADMIN_TOKEN_FILE", `${path} is not a small regular file`);
      text = await fh.readFile({ encoding: "utf8" });
    } finally {
      await fh.close();
    }
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    const code = (err as { code?: string }).code;
    if (code === "ENOENT") return undefined;
    throw new ConfigError("KEYCAP_ADMIN_TOKEN_FILE", `${path} cannot be read (${code ?? "unknown error"})`);
  }
  const token = text.trim();
  if (!isUsable(token)) throw new ConfigError("KEYCAP_ADMIN_TOKEN_FILE", `${path} must hold one token of printable ASCII without spaces`);
  return token;
}

/**
 * Writes a fresh token through a temporary file hard-linked into place, so a concurrent
 * reader never sees a half-written file and two first starts cannot overwrite each other.
 * @returns the token, or undefined when the file appeared meanwhile.
 */
async function createTokenFile(path: string): Promise<string | undefined> {
  const token = randomBytes(32).toString("base64url");
  try {
    return (await writeSecretFile(path, `${token}\n`, { replace: false })) ? token : undefined;
  } catch (err) {
    if (err instanceof SecretFileWriteError) throw new ConfigError("KEYCAP_ADMIN_TOKEN_FILE", err.message);
    throw err;
  }
}

/**
 * The admin credential as both services use it: resolved from the configuration, and
 * where it came from logged (the path when it was just generated, never the secret).
 */
export async function loadAdminCredential(
  config: { adminToken: string | undefined; adminTokenFile: string; dataDir: string },
  logger: { info(obj: object, msg: string): void },
): Promise<AdminCredential> {
  const credential = await AdminCredential.resolve(config.adminToken, config.adminTokenFile, join(config.dataDir, "admin-token"));
  if (credential.source.kind === "generated") {
    logger.info({ path: credential.source.path }, "admin credential generated; present its contents as authorization: Bearer <token>");
  } else {
    logger.info({ source: credential.source.kind, ...(credential.source.kind === "file" ? { path: credential.source.path } : {}) }, "admin credential loaded");
  }
  return credential;
}
