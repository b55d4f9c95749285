/**
 * The host side of the MCP gateway tests: `keycap mcp --policy FILE` launched the way a
 * desktop host launches it (a child process speaking MCP on stdio), driven by the official
 * SDK client (`Client` + `StdioClientTransport`).
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CLI_ENTRY } from "./processes";

/** Where the counting upstream's compiled entry is. */
export const COUNTING_SERVER = path.resolve(process.cwd(), "dist/test/support/counting-mcp-server.js");

/** A gateway process and the SDK client connected to it. */
export interface McpHost {
  client: Client;
  pid: number;
  /** Everything the gateway wrote on stderr (its log, and its upstreams'). */
  stderr(): string;
  /** SIGKILLs the gateway (and waits until it is gone). */
  kill(): Promise<void>;
  close(): Promise<void>;
}

/** Starts `keycap mcp --policy <file>` with `env` and connects the SDK client (initialize included). */
export async function connectHost(policyFile: string, env: Record<string, string>): Promise<McpHost> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [CLI_ENTRY, "mcp", "--policy", policyFile],
    env: { PATH: process.env["PATH"] ?? "", HOME: process.env["HOME"] ?? "", ...env },
    stderr: "pipe",
  });
  let err = "";
  transport.stderr?.on("data", (d: Buffer) => (err += d.toString()));
  const client = new Client({ name: "keycap-test-host", version: "1.0.0" });
  try {
    await client.connect(transport);
  } catch (e) {
    throw new Error(`keycap mcp did not start: ${e instanceof Error ? e.message : String(e)}\n${err}`);
  }
  const pid = transport.pid;
  if (pid === null) throw new Error("keycap mcp has no pid");
  return {
    client,
    pid,
    stderr: () => err,
    kill: async () => {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        return;
      }
      for (let i = 0; i < 100 && isAlive(pid); i++) await new Promise((r) => setTimeout(r, 50));
      await client.close().catch(() => undefined);
    },
    close: () => client.close(),
  };
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Writes a policy (YAML text) into `dir` and returns its path. */
export function writePolicy(dir: string, name: string, yaml: string): string {
  const file = path.join(dir, name);
  fs.writeFileSync(file, yaml);
  return file;
}

/** A policy for the counting upstream, `tools` being its YAML lines under `tools:` (indented 6). */
export function countingPolicy(stateFile: string, tools: string, upstream = "counter"): string {
  return [
    "version: 1",
    "upstreams:",
    `  ${upstream}:`,
    `    command: ${JSON.stringify(process.execPath)}`,
    `    args: [${JSON.stringify(COUNTING_SERVER)}]`,
    `    env: { COUNTING_STATE_FILE: ${JSON.stringify(stateFile)} }`,
    "    tools:",
    tools,
    "",
  ].join("\n");
}
