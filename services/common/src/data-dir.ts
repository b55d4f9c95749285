import * as fs from "node:fs";
import * as path from "node:path";

/** The data directory's name when KEYCAP_DATA_DIR does not say otherwise. */
export const DATA_DIR_NAME = ".keycap";

/**
 * The data directory: KEYCAP_DATA_DIR (relative to `cwd`), else the nearest `.keycap`
 * folder in `cwd` or above it, else `cwd/.keycap` (created at the first start). Looking
 * upwards, as git does for `.git`, is what lets an operator command run from a subfolder
 * of the folder where `make run` started find the same credentials and keys.
 *
 * The TypeScript client repeats this lookup (clients/ts/src/credentials.ts, which may not
 * import service code); test/unit/data_dir.spec.ts keeps the two in agreement.
 */
export function resolveDataDir(configured: string | undefined, cwd: string = process.cwd()): string {
  if (configured !== undefined && configured.trim() !== "") return path.resolve(cwd, configured.trim());
  for (let dir = path.resolve(cwd); ; dir = path.dirname(dir)) {
    if (isDirectory(path.join(dir, DATA_DIR_NAME))) return path.join(dir, DATA_DIR_NAME);
    if (path.dirname(dir) === dir) return path.join(path.resolve(cwd), DATA_DIR_NAME);
  }
}

function isDirectory(p: string): boolean {
  try {
    return fs.statSync(p).isDirectory();
  } catch {
    return false;
  }
}
