#!/usr/bin/env node
import { Command } from "commander";
import * as fs from "node:fs";
import * as path from "node:path";
import { projectRoot } from "../../common/src/repo-paths";
import { loadConfig } from "../../common/src/config";
import { runServices } from "../../common/src/service-runner";
import { rotateSigningKeys } from "../../kernel/src/signing-keys";
import { startKernel } from "../../kernel/src/main";
import { startLedger } from "../../ledger/src/main";
import { OperatorError } from "./operator-context";
import { addOperatorCommands } from "./operator-commands";

function packageVersion(): string {
  const pkg = JSON.parse(fs.readFileSync(path.join(projectRoot(), "package.json"), "utf8")) as { version?: string };
  return pkg.version ?? "unknown";
}

/** The `keycap` command line: run services, and (for operators) inspect the ledger. */
export function buildProgram(): Command {
  const program = new Command("keycap")
    .description("keycap: enforceable idempotency for agent tool calls")
    .version(packageVersion(), "-V, --version", "print the keycap version")
    .showHelpAfterError();

  program
    .command("serve")
    .description("run services in the foreground (configuration from the environment, see README)")
    .argument("[service]", "all | kernel | ledger", "all")
    .action(async (service: string) => {
      switch (service) {
        case "all":
          return runServices("keycap", [startKernel, startLedger]);
        case "kernel":
          return runServices("kernel", [startKernel]);
        case "ledger":
          return runServices("ledger", [startLedger]);
        default:
          program.error(`keycap serve: unknown service ${JSON.stringify(service)} (all, kernel, ledger)`);
      }
    });
  program
    .command("keys")
    .description("the kernel's signing keys")
    .command("rotate")
    .description(
      "make a new current signing key; the old one stays published for KEYCAP_RETIRED_KEY_GRACE_SECONDS (SIGHUP the kernel to sign with the new key)",
    )
    .action(async () => {
      const config = loadConfig();
      const keys = await rotateSigningKeys(config.signingKeyFile, { retiredGraceSeconds: config.retiredKeyGraceSeconds });
      process.stdout.write(`rotated ${keys.path}: current key id ${keys.currentKid}; send the kernel SIGHUP (or restart it) to sign with it\n`);
    });

  addOperatorCommands(program);
  return program;
}

if (require.main === module) {
  buildProgram()
    .parseAsync(process.argv)
    .catch((err: unknown) => {
      const message = err instanceof OperatorError || err instanceof Error ? err.message : String(err);
      process.stderr.write(`keycap: ${message.split("\n")[0]}\n`);
      process.exit(1);
    });
}
