/**
 * The Python MCP host's environment: a venv with the official `mcp` SDK at the versions
 * test/python/requirements-mcp.txt pins, made once with the machine's python3 and pip under
 * ~/.cache/keycap/ (keyed by the requirements' hash, so a changed pin makes a new one).
 */
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

export const PYTHON_MCP_REQUIREMENTS = path.resolve("test/python/requirements-mcp.txt");

/** The venv's python, installing it first when missing. */
export function ensurePythonMcp(): string {
  const hash = createHash("sha256").update(fs.readFileSync(PYTHON_MCP_REQUIREMENTS)).digest("hex").slice(0, 12);
  const dir = path.join(os.homedir(), ".cache", "keycap", `python-mcp-${hash}`);
  const python = path.join(dir, "bin", "python");
  const done = path.join(dir, ".installed");
  if (fs.existsSync(done)) return python;
  fs.rmSync(dir, { recursive: true, force: true });
  const run = (cmd: string, args: string[]): void => {
    const r = spawnSync(cmd, args, { encoding: "utf8", timeout: 240_000 });
    if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed (${r.status ?? r.signal}):\n${r.stdout}\n${r.stderr}`);
  };
  run("python3", ["-m", "venv", dir]);
  run(path.join(dir, "bin", "pip"), ["install", "--quiet", "--disable-pip-version-check", "-r", PYTHON_MCP_REQUIREMENTS]);
  fs.writeFileSync(done, new Date().toISOString() + "\n");
  return python;
}
