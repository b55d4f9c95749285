import * as fs from "node:fs";
import * as path from "node:path";

/**
 * `$KEYCAP_DATA_DIR/kernel.pid`: which process to SIGHUP after `keycap keys rotate`, and
 * where that kernel listens, so `keycap keys rotate --reload` can check that the process
 * is a live kernel before signalling it and that it signs with the new key afterwards.
 */
export interface KernelPidFile {
  pid: number;
  /** The bound kernel address (host:port), as the "ready" line reports it. */
  address: string;
  startedAt: string;
}

export function kernelPidFilePath(dataDir: string): string {
  return path.join(dataDir, "kernel.pid");
}

/** Writes the pid file; the returned function removes it, unless another kernel has replaced it since. */
export function writeKernelPidFile(dataDir: string, address: string): () => void {
  const file = kernelPidFilePath(dataDir);
  const record: KernelPidFile = { pid: process.pid, address, startedAt: new Date().toISOString() };
  fs.mkdirSync(dataDir, { recursive: true });
  fs.writeFileSync(file, JSON.stringify(record) + "\n", { mode: 0o644 });
  return () => {
    if (readKernelPidFile(dataDir)?.pid === process.pid) fs.rmSync(file, { force: true });
  };
}

/** The pid file's record, or undefined when there is none or it is not one of ours. */
export function readKernelPidFile(dataDir: string): KernelPidFile | undefined {
  let text: string;
  try {
    text = fs.readFileSync(kernelPidFilePath(dataDir), "utf8");
  } catch {
    return undefined;
  }
  try {
    const r = JSON.parse(text) as Partial<KernelPidFile>;
    if (typeof r.pid === "number" && Number.isSafeInteger(r.pid) && r.pid > 0 && typeof r.address === "string")
      return { pid: r.pid, address: r.address, startedAt: String(r.startedAt ?? "") };
  } catch {
    // not JSON: treated as absent
  }
  return undefined;
}
