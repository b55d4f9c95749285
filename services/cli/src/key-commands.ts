/**
 * `keycap keys rotate [--reload]`: a new current signing key, and (with --reload) the
 * SIGHUP that makes the running kernel sign with it, found through the pid file the
 * kernel keeps in the data directory.
 */
import type { Command } from "commander";
import { KernelClient, type TlsOptions } from "../../../clients/ts/src";
import { loadConfig } from "../../common/src/config";
import type { KernelPidFile } from "../../kernel/src";
import { OperatorError, tlsOptions, withTlsOptions, type OperatorOptions } from "./operator-context";

const RELOAD_WAIT_MS = 10_000;

export function addKeyCommands(program: Command): void {
  withTlsOptions(
    program
      .command("keys")
      .description("the kernel's signing keys")
      .command("rotate")
      .description(
        "make a new current signing key; the old one stays published for KEYCAP_RETIRED_KEY_GRACE_SECONDS (the kernel signs with the new one after SIGHUP: --reload sends it)",
      ),
  )
    .option(
      "--reload",
      "then SIGHUP the kernel running with this data directory (its pid is in $KEYCAP_DATA_DIR/kernel.pid) and wait until it signs with the new key",
    )
    .action(async (o: OperatorOptions & { reload?: boolean }) => {
      // The kernel's module loads its database driver and more: only for this command (main.ts).
      const { readKernelPidFile, rotateSigningKeys } = await import("../../kernel/src/index.js");
      const config = loadConfig();
      // With --reload, find the kernel first: a rotation it cannot be told about is not what was asked for.
      const target = o.reload ? await runningKernel(config.dataDir, tlsOptions(o)) : undefined;
      try {
        const keys = await rotateSigningKeys(config.signingKeyFile, { retiredGraceSeconds: config.retiredKeyGraceSeconds });
        process.stdout.write(`rotated ${keys.path}: current key id ${keys.currentKid}\n`);
        if (target) {
          process.stdout.write(await reloadKernel(target, keys.currentKid));
          return;
        }
        const running = readKernelPidFile(config.dataDir);
        process.stdout.write(
          running
            ? `send the kernel SIGHUP to sign with it: kill -HUP ${running.pid} (or rotate with --reload)\n`
            : `send the kernel SIGHUP (or restart it) to sign with it; no kernel.pid in ${config.dataDir}\n`,
        );
      } finally {
        target?.client.close();
      }
    });
}

interface RunningKernel extends KernelPidFile {
  client: KernelClient;
  dataDir: string;
}

/** The kernel named by the data directory's pid file, checked to be alive and answering. */
async function runningKernel(dataDir: string, tls: TlsOptions | undefined): Promise<RunningKernel> {
  const running = (await import("../../kernel/src/index.js")).readKernelPidFile(dataDir);
  if (!running)
    throw new OperatorError(
      `--reload: no kernel.pid in ${dataDir}: no kernel runs with this data directory (nothing rotated); start one, or rotate without --reload`,
    );
  try {
    process.kill(running.pid, 0);
  } catch {
    throw new OperatorError(
      `--reload: ${dataDir}/kernel.pid names pid ${running.pid}, which is not running (left by a kernel that did not stop cleanly; nothing rotated)`,
    );
  }
  const client = new KernelClient(running.address, { token: "", ...(tls ? { tls } : {}) });
  // A pid can be reused by another program after a crash: signal it only if a kernel answers at the recorded address.
  try {
    await client.signingKeys({ timeoutMs: 3000 });
  } catch {
    client.close();
    throw new OperatorError(
      `--reload: no kernel answers at ${running.address} (from ${dataDir}/kernel.pid); not signalling pid ${running.pid}, nothing rotated`,
    );
  }
  return { ...running, client, dataDir };
}

/** SIGHUPs the kernel and waits until it signs with `kid`. */
async function reloadKernel(kernel: RunningKernel, kid: string): Promise<string> {
  process.kill(kernel.pid, "SIGHUP");
  const until = Date.now() + RELOAD_WAIT_MS;
  for (;;) {
    const now = await kernel.client.signingKeys({ timeoutMs: 3000 }).catch(() => undefined);
    if (now?.currentKeyId === kid) return `kernel pid ${kernel.pid} at ${kernel.address} now signs with ${kid}\n`;
    if (Date.now() > until)
      throw new OperatorError(
        `--reload: sent SIGHUP to kernel pid ${kernel.pid}, but after ${RELOAD_WAIT_MS / 1000} s it still signs with ${now?.currentKeyId ?? "(no answer)"}; see its log`,
      );
    await new Promise((r) => setTimeout(r, 100));
  }
}
