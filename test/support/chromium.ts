import { execFileSync } from "node:child_process";
import * as path from "node:path";
import { chromium, type Browser } from "playwright-core";

/**
 * Debian's chromium for the console's browser tests: found, or installed by
 * tools/chromium.sh (apt-get, as root; CI runs as root). Throws with the script's
 * message when it can be neither.
 */
export function chromiumPath(): string {
  const script = path.resolve(process.cwd(), "tools", "chromium.sh");
  try {
    return execFileSync("bash", [script], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 900_000 }).trim();
  } catch (err) {
    const stderr = String((err as { stderr?: unknown }).stderr ?? "").trim();
    throw new Error(`no chromium for the browser tests: ${stderr || String(err)}`);
  }
}

/** Headless chromium with the flags that work on a machine without GPU, sandbox or network. */
export function launchChromium(executablePath: string): Promise<Browser> {
  return chromium.launch({
    executablePath,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"],
  });
}
