#!/usr/bin/env node
// First: tracing (when OTEL_TRACES_EXPORTER asks for it) must start before grpc-js and mongodb load.
import "./tracing-first";
import { Command, CommanderError } from "commander";
import * as fs from "node:fs";
import * as path from "node:path";
import { projectRoot } from "../../common/src/repo-paths";
import { ConfigError } from "../../common/src/config";
import { OperatorError } from "./operator-context";
import { addKeyCommands } from "./key-commands";
import { addMcpCommand } from "./mcp-command";
import { addOperatorCommands } from "./operator-commands";
import { EXIT } from "./exit-status";

function packageVersion(): string {
  const pkg = JSON.parse(fs.readFileSync(path.join(projectRoot(), "package.json"), "utf8")) as { version?: string };
  return pkg.version ?? "unknown";
}

/** The `keycap` command line: run services, and (for operators) inspect the ledger. */
export function buildProgram(): Command {
  const program = new Command("keycap")
    .description("keycap: enforceable idempotency for agent tool calls")
    .version(packageVersion(), "-V, --version", "print the keycap version")
    // Subcommands inherit both: commander's usage errors reach the one failure path in
    // main() below instead of exiting on their own with status 1.
    .exitOverride()
    .configureOutput({ outputError: () => undefined });

  program
    .command("serve")
    .description("run services in the foreground (configuration from the environment, see docs/configuration.md)")
    .argument("[service]", "all | kernel | ledger | gateway", "all")
    .action(async (service: string) => {
      // Loaded here, not at the top: an operator's read (`keycap stats`) starts in a third of
      // the time without the services, the database driver and the console.
      const [{ runServices }, { startKernel }, { startLedger }, { startGateway, startGatewayIfConfigured }, { startConsoleIfConfigured }] = await Promise.all([
        import("../../common/src/service-runner.js"),
        import("../../kernel/src/index.js"),
        import("../../ledger/src/main.js"),
        import("../../gateway/src/main.js"),
        import("../../console/src/main.js"),
      ]);
      switch (service) {
        case "all":
          return runServices("keycap", [startKernel, startLedger, startGatewayIfConfigured, startConsoleIfConfigured]);
        case "kernel":
          return runServices("kernel", [startKernel]);
        case "ledger":
          return runServices("ledger", [startLedger]);
        case "gateway":
          return runServices("gateway", [startGateway]);
        default:
          program.error(`keycap serve: unknown service ${JSON.stringify(service)} (all, kernel, ledger, gateway)`);
      }
    });
  program
    .command("console")
    .description("serve the web console (KEYCAP_CONSOLE_LISTEN, default 127.0.0.1:50054) over the ledger admin API and the kernel")
    .action(async () => (await import("../../console/src/main.js")).runConsole());
  addKeyCommands(program);
  addOperatorCommands(program);
  addMcpCommand(program);
  return program;
}

/**
 * Prints a failure as one line on stderr and sets the exit status (exit-status.ts). With
 * --json, stdout still gets one JSON document (`null`) and the stderr line is a JSON object.
 */
export function reportFailure(err: unknown, json: boolean): void {
  let exitCode: number = EXIT.FAILURE;
  let code = "";
  let reason = "";
  let message = err instanceof Error ? err.message : String(err);
  if (err instanceof CommanderError) {
    if (err.exitCode === 0) return; // --help, --version
    exitCode = EXIT.USAGE;
    // No command given: commander has printed the help on stderr; that is the message.
    if (err.code === "commander.help") {
      process.exitCode = exitCode;
      return;
    }
    code = err.code;
    message = `${err.message.replace(/^error: /, "")} (add --help for usage)`;
  } else if (err instanceof OperatorError) {
    ({ exitCode, code, reason } = err);
  } else if (err instanceof ConfigError) {
    exitCode = EXIT.USAGE;
  }
  message = message.split("\n")[0] ?? "";
  if (json) {
    process.stdout.write("null\n");
    process.stderr.write(JSON.stringify({ error: { message, exitCode, ...(code ? { code } : {}), ...(reason ? { reason } : {}) } }) + "\n");
  } else {
    process.stderr.write(`keycap: ${message}\n`);
  }
  process.exitCode = exitCode;
  // Let stdout drain, but do not wait on a channel that is still backing off.
  setTimeout(() => process.exit(exitCode), 2000).unref();
}

if (require.main === module) {
  buildProgram()
    .parseAsync(process.argv)
    .catch((err: unknown) => reportFailure(err, process.argv.includes("--json")));
}
