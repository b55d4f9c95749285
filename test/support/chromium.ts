import { execFileSync } from "node:child_process";
import * as path from "node:path";
import { expect } from "chai";
import { chromium, type Browser, type Page } from "playwright-core";

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

/** Signs `page` in to the console at `base` with the admin credential `token`; it lands on the overview. */
export async function signInToConsole(page: Page, base: string, token: string): Promise<void> {
  await page.goto(`${base}/`);
  await page.fill("#token", token);
  await Promise.all([page.waitForNavigation(), page.click("form.signin button[type=submit]")]);
  expect(await page.locator("h1").textContent()).to.equal("Overview");
}
