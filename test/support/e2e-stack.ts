/**
 * Starts a whole keycap stack for tests written in other languages (pytest,
 * go test): a MongoDB-protocol server from the harness, then `keycap serve all`
 * as a real child process on free loopback ports. Prints ONE JSON line
 * `{"kernel","ledger","admin","admin_token","runtime_token","mongo_backend","mongodb_uri","mongodb_database","data_dir"}`
 * on stdout once ready, and stops everything when its stdin closes or on SIGTERM/SIGINT.
 * `runtime_token` is the bearer secret of the runtime principal "local-runtime".
 *
 * With KEYCAP_E2E_TLS=1 all three listeners speak TLS (server certificate for
 * 127.0.0.1 and localhost from a test CA), the kernel accepts client certificates
 * (optional), and the line also carries `"tls": {"ca_file", "client_cert_file",
 * "client_key_file", "client_principal", "unmapped_client_cert_file",
 * "unmapped_client_key_file", "other_ca_file"}`: a client certificate whose URI SAN
 * maps to the runtime principal `client_principal` (created, owns no tools yet), one
 * from the same CA that maps to nobody, and a CA that signed nothing keycap trusts.
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
import { createTestPki } from "./tls-certs";

const MTLS_PRINCIPAL = "e2e-mtls";

interface TlsInfo {
  ca_file: string;
  client_cert_file: string;
  client_key_file: string;
  client_principal: string;
  unmapped_client_cert_file: string;
  unmapped_client_key_file: string;
  other_ca_file: string;
}

function tlsSetup(dataDir: string): { env: Record<string, string>; info: TlsInfo } {
  const dir = path.join(dataDir, "pki");
  fs.mkdirSync(dir);
  const pki = createTestPki(dir);
  const client = pki.clientFor(MTLS_PRINCIPAL);
  const unmapped = pki.clientFor("e2e-unmapped");
  return {
    env: {
      KEYCAP_TLS_CERT_FILE: pki.server.cert,
      KEYCAP_TLS_KEY_FILE: pki.server.key,
      KEYCAP_TLS_CLIENT_CA_FILE: pki.ca.cert,
      KEYCAP_KERNEL_CLIENT_AUTH: "optional",
      KEYCAP_CERT_PRINCIPALS: JSON.stringify({ [`spiffe://keycap.test/runtime/${MTLS_PRINCIPAL}`]: MTLS_PRINCIPAL }),
      // The services dial each other (ledger -> kernel keys, kernel -> ledger lookups) over TLS too.
      KEYCAP_TLS_CA_FILE: pki.ca.cert,
    },
    info: {
      ca_file: pki.ca.cert,
      client_cert_file: client.cert,
      client_key_file: client.key,
      client_principal: MTLS_PRINCIPAL,
      unmapped_client_cert_file: unmapped.cert,
      unmapped_client_key_file: unmapped.key,
      other_ca_file: pki.otherCa.cert,
    },
  };
}

/** Runs the keycap CLI to completion; rejects with its output on a non-zero exit. */
function cli(args: string[], env: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, [path.join(projectRoot(), "dist/services/cli/src/main.js"), ...args], { env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    c.stdout.on("data", (d: Buffer) => (out += d.toString()));
    c.stderr.on("data", (d: Buffer) => (out += d.toString()));
    c.once("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`keycap ${args.join(" ")} exited ${code}: ${out}`))));
  });
}

async function main(): Promise<void> {
  const mongo = await startMongoServer({ logger: createLogger("e2e-stack", "warn") });
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-e2e-"));
  const adminToken = crypto.randomBytes(24).toString("base64url");
  const runtimeToken = `keycap_rt_${crypto.randomBytes(24).toString("base64url")}`;
  const tls = process.env["KEYCAP_E2E_TLS"] === "1" ? tlsSetup(dataDir) : undefined;
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    MONGODB_URI: mongo.uri,
    KEYCAP_MONGODB_DATABASE: `e2e_${crypto.randomBytes(4).toString("hex")}`,
    KEYCAP_DATA_DIR: dataDir,
    KEYCAP_KERNEL_LISTEN: "127.0.0.1:0",
    KEYCAP_LEDGER_LISTEN: "127.0.0.1:0",
    KEYCAP_ADMIN_LISTEN: "127.0.0.1:0",
    KEYCAP_ADMIN_TOKEN: adminToken,
    KEYCAP_RUNTIME_TOKEN: runtimeToken,
    // info: the "ready" line this script waits for is an info record (stdout is parsed, not shown).
    KEYCAP_LOG_LEVEL: "info",
    ...tls?.env,
  };
  const child = spawn(process.execPath, [path.join(projectRoot(), "dist/services/cli/src/main.js"), "serve", "all"], {
    env,
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
        const announce = (): void => {
          process.stdout.write(
            JSON.stringify({
              ...e,
              admin_token: adminToken,
              runtime_token: runtimeToken,
              mongo_backend: mongo.backend,
              // Sinks in other languages record refusals and spent capabilities here.
              mongodb_uri: mongo.uri,
              mongodb_database: env["KEYCAP_MONGODB_DATABASE"],
              data_dir: dataDir,
              ...(tls ? { tls: tls.info } : {}),
            }) + "\n",
          );
        };
        if (!tls) return announce();
        cli(["principals", "create", MTLS_PRINCIPAL, "--role", "runtime", "--kernel", e["kernel"] ?? "", "--json"], env).then(announce, (err: unknown) => {
          process.stderr.write(`e2e-stack: ${err instanceof Error ? err.message : String(err)}\n`);
          void stop(1);
        });
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
