/**
 * Starts a whole keycap stack for tests written in other languages (pytest,
 * go test): a MongoDB-protocol server from the harness, then `keycap serve all`
 * as a real child process on free loopback ports. Prints ONE JSON line
 * `{"kernel","ledger","admin","admin_token","mongo_backend"}` on stdout once
 * ready, and stops everything when its stdin closes or on SIGTERM/SIGINT.
 *
 * Usage: node dist/test/support/e2e-stack.js
 */
import { spawn } from "node:child_process";
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as readline from "node:readline";
import { startMongoServer } from "../../services/common/src/embedded-mongo";
import { createLogger } from "../../services/common/src/logger";
import { projectRoot } from "../../services/common/src/repo-paths";

async function main(): Promise<void> {
  const mongo = await startMongoServer({ logger: createLogger("e2e-stack", "warn") });
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-e2e-"));
  const adminToken = crypto.randomBytes(24).toString("base64url");
  const child = spawn(process.execPath, [path.join(projectRoot(), "dist/services/cli/src/main.js"), "serve", "all"], {
    env: {
      ...process.env,
      MONGODB_URI: mongo.uri,
      KEYCAP_MONGODB_DATABASE: `e2e_${crypto.randomBytes(4).toString("hex")}`,
      KEYCAP_DATA_DIR: dataDir,
      KEYCAP_KERNEL_LISTEN: "127.0.0.1:0",
      KEYCAP_LEDGER_LISTEN: "127.0.0.1:0",
      KEYCAP_ADMIN_LISTEN: "127.0.0.1:0",
      KEYCAP_ADMIN_TOKEN: adminToken,
      // info: the "ready" line this script waits for is an info record (stdout is parsed, not shown).
      KEYCAP_LOG_LEVEL: "info",
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  let stopping = false;
  const stop = async (code: number): Promise<void> => {
    if (stopping) return;
    stopping = true;
    child.kill("SIGTERM");
    await new Promise((r) => (child.exitCode !== null ? r(null) : child.once("exit", r)));
    await mongo.stop();
    fs.rmSync(dataDir, { recursive: true, force: true });
    process.exit(code);
  };
  child.once("exit", (code) => {
    if (!stopping) {
      process.stderr.write(`e2e-stack: keycap exited with ${code}\n`);
      void mongo.stop().then(() => process.exit(1));
    }
  });
  readline.createInterface({ input: child.stdout! }).on("line", (line) => {
    try {
      const rec = JSON.parse(line) as { msg?: string; endpoints?: { listener: string; address: string }[] };
      if (rec.msg === "ready" && rec.endpoints) {
        const e = Object.fromEntries(rec.endpoints.map((x) => [x.listener, x.address]));
        process.stdout.write(JSON.stringify({ ...e, admin_token: adminToken, mongo_backend: mongo.backend, data_dir: dataDir }) + "\n");
      }
    } catch {
      // not a log line
    }
  });
  process.stdin.resume();
  process.stdin.on("end", () => void stop(0));
  process.on("SIGTERM", () => void stop(0));
  process.on("SIGINT", () => void stop(0));
}

void main().catch((err: unknown) => {
  process.stderr.write(`e2e-stack: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
