/**
 * `keycap mcp --policy FILE`: the MCP gateway over stdio (services/mcp, docs/mcp.md).
 * A policy or registration problem stops the start with every problem listed on stderr
 * (exit status 2); stdout carries nothing but MCP.
 */
import type { Command } from "commander";
import { PolicyError, PolicyMismatchError, RegistrationError, runMcpGateway } from "../../mcp/src";
import { EXIT } from "./exit-status";

export function addMcpCommand(program: Command): void {
  program
    .command("mcp")
    .description("run the MCP gateway: an MCP server on stdio in front of the upstream MCP servers the policy names (docs/mcp.md)")
    .requiredOption("--policy <file>", "the policy file (YAML or JSON; schema: services/mcp/src/policy.schema.json)")
    .action(async (o: { policy: string }) => {
      try {
        await runMcpGateway(o.policy);
      } catch (err) {
        if (!(err instanceof PolicyError || err instanceof PolicyMismatchError || err instanceof RegistrationError)) throw err;
        process.stderr.write(`keycap mcp: ${err.message}\n`);
        process.exitCode = EXIT.USAGE;
      }
      // Upstream children and channels are closed; do not wait on a timer of a library.
      setTimeout(() => process.exit(process.exitCode ?? EXIT.OK), 1000).unref();
    });
}
