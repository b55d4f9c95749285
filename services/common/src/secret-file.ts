import { randomBytes } from "node:crypto";
import { link, mkdir, open, rename, rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";

/** Why a secret file could not be written: the errno code, or "unknown error". */
export class SecretFileWriteError extends Error {
  constructor(
    readonly path: string,
    readonly errno: string,
  ) {
    super(`${path} cannot be written (${errno})`);
    this.name = "SecretFileWriteError";
  }
}

/**
 * Writes a secret (mode 0600, directory 0700) through a temporary file in the
 * same directory, so a reader never sees a half-written file. With
 * `replace: false` the temporary file is hard-linked into place, which fails
 * if the path exists: two first starts cannot overwrite each other.
 *
 * @returns false when `replace` is false and the file already existed.
 * @throws SecretFileWriteError when it cannot be written.
 */
export async function writeSecretFile(path: string, contents: string, { replace }: { replace: boolean }): Promise<boolean> {
  const dir = dirname(path);
  const tmp = join(dir, `.${basename(path)}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`);
  try {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    // Created 0600 from the first byte: chmod after writing would leave a window.
    const fh = await open(tmp, "wx", 0o600);
    try {
      await fh.writeFile(contents, { encoding: "utf8" });
      await fh.sync();
    } finally {
      await fh.close();
    }
    if (replace) {
      await rename(tmp, path);
    } else {
      try {
        await link(tmp, path);
      } catch (err) {
        if (errnoCode(err) === "EEXIST") return false;
        throw err;
      }
    }
  } catch (err) {
    throw new SecretFileWriteError(path, errnoCode(err) ?? "unknown error");
  } finally {
    await rm(tmp, { force: true }).catch(() => undefined);
  }
  await syncDirectory(dir);
  return true;
}

// Makes the rename/link itself durable; some platforms cannot fsync a directory, and
// the file's own contents are already synced, so a failure here is not fatal.
async function syncDirectory(dir: string): Promise<void> {
  try {
    const fh = await open(dir, "r");
    try {
      await fh.sync();
    } finally {
      await fh.close();
    }
  } catch {
    // best effort
  }
}

/** The `code` of a Node system error (e.g. "ENOENT"), if any. */
export function errnoCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}
