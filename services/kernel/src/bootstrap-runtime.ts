/**
 * The local default's first runtime principal, "local-runtime" (DESIGN §8, §9): so that
 * `make run` stays one command, the kernel creates it on first start with a secret in
 * `$KEYCAP_DATA_DIR/runtime-token` (0600), or with KEYCAP_RUNTIME_TOKEN when set. The
 * file is the source of truth for this one principal: a stale digest is brought in line,
 * but a revoked principal stays revoked. KEYCAP_BOOTSTRAP_RUNTIME=0 turns it off.
 */
import { readFile } from "node:fs/promises";
import { ConfigError } from "../../common/src/config";
import type { Logger } from "../../common/src/logger";
import { errnoCode, SecretFileWriteError, writeSecretFile } from "../../common/src/secret-file";
import { newSecret, type PrincipalStore } from "./principal-store";

export const LOCAL_RUNTIME = "local-runtime";

export interface BootstrapResult {
  /** Where the secret is ("KEYCAP_RUNTIME_TOKEN" when it came from the environment). */
  source: string;
  outcome: "created" | "unchanged" | "secret-updated" | "revoked";
}

async function readOrCreate(file: string): Promise<{ secret: string; created: boolean }> {
  try {
    const secret = (await readFile(file, "utf8")).trim();
    if (!/^[A-Za-z0-9\-._~+/]{16,}=*$/.test(secret))
      throw new ConfigError("KEYCAP_RUNTIME_TOKEN_FILE", `${file} must hold one token of printable ASCII without spaces`);
    return { secret, created: false };
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    if (errnoCode(err) !== "ENOENT") throw new ConfigError("KEYCAP_RUNTIME_TOKEN_FILE", `${file} cannot be read (${errnoCode(err) ?? "unknown error"})`);
  }
  const secret = newSecret("runtime");
  try {
    if (await writeSecretFile(file, `${secret}\n`, { replace: false })) return { secret, created: true };
  } catch (err) {
    if (err instanceof SecretFileWriteError) throw new ConfigError("KEYCAP_RUNTIME_TOKEN_FILE", err.message);
    throw err;
  }
  // A replica sharing the data dir wrote it first.
  return { secret: (await readFile(file, "utf8")).trim(), created: false };
}

export async function bootstrapRuntime(
  principals: PrincipalStore,
  opts: { token: string | undefined; file: string; logger: Logger },
): Promise<BootstrapResult> {
  const { secret, source } =
    opts.token !== undefined ? { secret: opts.token, source: "KEYCAP_RUNTIME_TOKEN" } : { ...(await readOrCreate(opts.file)), source: opts.file };
  const outcome = await principals.ensure(LOCAL_RUNTIME, "runtime", secret, "bootstrap");
  if (outcome === "revoked") opts.logger.warn({ principal: LOCAL_RUNTIME }, "the bootstrap runtime principal is revoked; its secret stays refused");
  else
    opts.logger.info(
      { principal: LOCAL_RUNTIME, credential: source, outcome },
      "local runtime principal ready; present its secret as authorization: Bearer <secret>",
    );
  return { source, outcome };
}
