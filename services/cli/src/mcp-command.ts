/**
 * `keycap mcp --policy FILE`: the MCP gateway over stdio (services/mcp, docs/mcp.md).
 * A policy or registration problem stops the start with every problem listed on stderr
 * (exit status 2); stdout carries nothing but MCP.
 *
 * `keycap mcp init [--name NAME] [--out FILE] -- COMMAND [ARG...]`: a starting policy from the
 * upstream's tools/list, on stdout or into FILE.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { Command } from "commander";
import { stopTracing } from "../../common/src/tracing";
import { EXIT } from "./exit-status";

export function addMcpCommand(program: Command): void {
  const mcp = program
    .command("mcp")
    .description("run the MCP gateway: an MCP server on stdio in front of the upstream MCP servers the policy names (docs/mcp.md)")
    // Not requiredOption: commander would then ask `mcp init` for it too.
    .option("--policy <file>", "the policy file (YAML or JSON; schema: services/mcp/src/policy.schema.json)")
    .option("--http <host:port>", "serve MCP's Streamable HTTP at http://<host:port>/mcp (loopback only; env KEYCAP_MCP_LISTEN) instead of stdio")
    .action(async (o: { policy?: string; http?: string }) => {
      if (o.policy === undefined) return mcp.error("--policy <file> is required (or `keycap mcp init` to write one)");
      // The gateway's module (MCP SDK, database driver) loads only for this command (main.ts).
      const { PolicyError, PolicyMismatchError, RegistrationError, runMcpGateway } = await import("../../mcp/src/index.js");
      try {
        await runMcpGateway(o.policy, o.http !== undefined ? { http: o.http } : {});
      } catch (err) {
        if (!(err instanceof PolicyError || err instanceof PolicyMismatchError || err instanceof RegistrationError)) throw err;
        process.stderr.write(`keycap mcp: ${err.message}\n`);
        process.exitCode = EXIT.USAGE;
      }
      // Spans still batched go out first; then do not wait on a timer of a library.
      await stopTracing();
      setTimeout(() => process.exit(process.exitCode ?? EXIT.OK), 1000).unref();
    });
  mcp
    .command("init")
    .description("write a starting policy from an upstream MCP server's tools/list (started with stdio; put it after --)")
    .argument("<command...>", "the upstream's command and its arguments")
    .option("--name <name>", "the upstream's name in the policy (default: from the command)")
    .option("--out <file>", "write the policy here instead of stdout (an existing file is not overwritten)")
    .action(async (command: string[], o: { name?: string; out?: string }) => {
      const [cmd, ...args] = command;
      if (cmd === undefined) return mcp.error("the upstream's command is required");
      const name = o.name ?? defaultName(command);
      if (!/^[A-Za-z0-9_.-]{1,64}$/.test(name)) return mcp.error(`--name must be 1-64 of [A-Za-z0-9_.-], got ${JSON.stringify(name)}`);
      const { createStderrLogger, initPolicy } = await import("../../mcp/src/index.js");
      const text = await initPolicy(name, cmd, args, createStderrLogger("mcp", "warn"));
      if (o.out === undefined) process.stdout.write(text);
      else fs.writeFileSync(o.out, text, { flag: "wx" });
      setTimeout(() => process.exit(process.exitCode ?? EXIT.OK), 1000).unref();
    });
}

/** `npx -y @modelcontextprotocol/server-filesystem@1 /x` → `server-filesystem`. */
function defaultName(command: readonly string[]): string {
  const pkg = command.find((a, i) => i > 0 && !a.startsWith("-")) ?? command[0] ?? "upstream";
  const base = path.basename(pkg.replace(/@[^/@]*$/, "")).replace(/\.(m?js|py|ts)$/, "");
  const name = base.replace(/[^A-Za-z0-9_.-]/g, "-").slice(0, 64);
  return name === "" ? "upstream" : name;
}
