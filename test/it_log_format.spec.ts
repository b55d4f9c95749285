/**
 * Logs for people at a terminal, JSON for everything else (issue 13, item 4): a service
 * started on a real pseudo-terminal (util-linux `script`) prints readable, coloured lines;
 * NO_COLOR takes the colour away; a pipe gets JSON lines; KEYCAP_LOG_FORMAT overrides.
 */
import { spawn, spawnSync } from "node:child_process";
import { expect } from "chai";
import { CLI_ENTRY, serviceEnv } from "./support/processes";

// eslint-disable-next-line no-control-regex
const ANSI = /\u001b\[[0-9;]*m/;

/** Runs `keycap serve kernel` (on a pty when `tty`), returns its output up to the ready line. */
async function outputUntilReady(env: Record<string, string>, tty: boolean): Promise<string> {
  const command = `exec ${JSON.stringify(process.execPath)} ${JSON.stringify(CLI_ENTRY)} serve kernel`;
  const child = tty
    ? spawn("script", ["-qfec", command, "/dev/null"], { env: { ...process.env, ...env }, detached: true, stdio: ["pipe", "pipe", "pipe"] })
    : spawn(process.execPath, [CLI_ENTRY, "serve", "kernel"], { env: { ...process.env, ...env }, detached: true, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  try {
    return await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ready line within 60 s:\n${out}`)), 60_000);
      child.stdout!.on("data", (d: Buffer) => {
        out += d.toString("utf8");
        if (readyLine(out) !== "") {
          clearTimeout(timer);
          resolve(out);
        }
      });
      child.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`exited ${code} before ready:\n${out}`));
      });
    });
  } finally {
    try {
      process.kill(-child.pid!, "SIGTERM");
    } catch {
      // already gone
    }
  }
}

const strip = (l: string): string => l.replace(new RegExp(ANSI, "g"), "");
const isReady = (l: string): boolean => /"msg":"ready"/.test(l) || /INFO: ready( |$)/.test(strip(l).trimEnd());
const readyLine = (out: string): string => out.split(/\r?\n/).find(isReady) ?? "";

describe("log format", function () {
  this.timeout(120_000);
  const base = (extra: Record<string, string> = {}): Record<string, string> => {
    const env: Record<string, string> = { NO_COLOR: "", ...serviceEnv(extra) };
    return env;
  };

  it("at a terminal: one readable, coloured line per record, not JSON", async () => {
    const line = readyLine(await outputUntilReady(base(), true));
    expect(line).to.match(ANSI);
    const plain = strip(line);
    expect(plain).to.match(/^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: ready/);
    expect(plain.trim().startsWith("{")).to.equal(false);
  });

  it("at a terminal with NO_COLOR: readable and without colour codes", async () => {
    const line = readyLine(await outputUntilReady(base({ NO_COLOR: "1" }), true));
    expect(line).to.not.match(ANSI);
    expect(line).to.match(/INFO: ready/);
  });

  it("into a pipe: JSON lines; KEYCAP_LOG_FORMAT=json keeps a terminal on JSON", async () => {
    const piped = readyLine(await outputUntilReady(base(), false));
    expect(JSON.parse(piped)).to.include({ msg: "ready", level: "info" });
    const forced = readyLine(await outputUntilReady(base({ KEYCAP_LOG_FORMAT: "json" }), true));
    expect(JSON.parse(forced.trim())).to.include({ msg: "ready" });
  });

  it("refuses an unknown KEYCAP_LOG_FORMAT naming the setting", () => {
    const r = spawnSync(process.execPath, [CLI_ENTRY, "serve", "kernel"], {
      env: { ...process.env, ...base({ KEYCAP_LOG_FORMAT: "xml" }) },
      encoding: "utf8",
      timeout: 60_000,
    });
    expect(r.status).to.not.equal(0);
    expect(r.stderr).to.match(/KEYCAP_LOG_FORMAT.*auto, json, pretty/);
  });
});
