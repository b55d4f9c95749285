import * as fs from "node:fs";
import * as path from "node:path";

/** The project root: the nearest folder above this file with package.json. */
export function projectRoot(): string {
  let dir = __dirname;
  for (;;) {
    if (fs.existsSync(path.join(dir, "package.json"))) return dir;
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error(`no package.json above ${__dirname}`);
    dir = parent;
  }
}

/** The descriptor set `make generate` builds with `buf build`, for reflection. */
export function descriptorSetPath(): string {
  return path.join(projectRoot(), "gen", "keycap.binpb");
}
