/**
 * Run modes at the gateways (issue 30, ADR 0029), the parts that need no service: the sink
 * admission a gateway uses (sandbox capabilities admitted with their mode, Unsafe ones
 * refused), how the MCP gateway reads a call's mode from `_meta` and its settings, and the
 * mode it reads from the capability the kernel returned.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import { McpError } from "@modelcontextprotocol/sdk/types.js";
import { RemoteJwksSource } from "../../services/capability/src";
import { ConfigError } from "../../services/common/src/config";
import { KeycapError } from "../../services/common/src/errors";
import { CapabilityMinter, type MintInput } from "../../services/kernel/src/capability-minter";
import { loadOrCreateSigningKeys, type SigningKeys } from "../../services/kernel/src/signing-keys";
import { loadMcpOptions } from "../../services/mcp/src/mcp-options";
import { capabilityMode, LIVE, requestedRunMode } from "../../services/mcp/src/run-mode";
import { InMemorySpentStore, Sink } from "../../services/sink/src";

async function caught(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => undefined,
    (e: unknown) => e,
  );
}

describe("run modes at the gateways (ADR 0029)", () => {
  let dir: string;
  let keys: SigningKeys;
  let minter: CapabilityMinter;
  const idempotent: MintInput = { principal: "rt", toolId: "pay", effect: "idempotent", callId: "c1", attempt: 1, key: "k".repeat(43) };
  const unsafe: MintInput = { principal: "rt", toolId: "send", effect: "unsafe", callId: "c2", attempt: 1 };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "keycap-gw-modes-"));
    keys = await loadOrCreateSigningKeys(join(dir, "signing-key.json"), { retiredGraceSeconds: 905 });
    minter = new CapabilityMinter(keys);
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const sink = (sandbox?: "admit"): Sink =>
    new Sink({
      name: "gw",
      tools: () => true,
      keys: new RemoteJwksSource(async () => JSON.stringify(keys.publicJwks())),
      spentStore: new InMemorySpentStore(),
      ...(sandbox ? { sandbox } : {}),
    });
  const ctx = { method: "test", peer: "127.0.0.1:1" };

  describe("the sink admission of a gateway (sandbox: admit)", () => {
    it("admits a replay or shadow capability with its mode; a sink without the option refuses it SANDBOX_CAPABILITY_NOT_LIVE", async () => {
      for (const mode of ["replay", "shadow"] as const) {
        const { token } = await minter.mint({ ...idempotent, mode });
        expect((await sink("admit").admit(`Bearer ${token}`, ctx)).mode).to.equal(mode);
        const refused = await caught(sink().admit(`Bearer ${token}`, ctx));
        expect((refused as KeycapError).reason).to.equal("SANDBOX_CAPABILITY_NOT_LIVE");
      }
      const live = await minter.mint(idempotent);
      expect((await sink("admit").admit(`Bearer ${live.token}`, ctx)).mode).to.equal(undefined);
    });

    it("refuses an Unsafe capability of a sandbox run SANDBOX_UNSAFE_DENIED, and admits a live Unsafe one", async () => {
      for (const mode of ["replay", "shadow"] as const) {
        const { token } = await minter.mint({ ...unsafe, callId: `u-${mode}`, mode });
        const refused = await caught(sink("admit").admit(`Bearer ${token}`, ctx));
        expect(refused).to.be.instanceOf(KeycapError);
        expect([(refused as KeycapError).reason, (refused as KeycapError).metadata["mode"]]).to.deep.equal(["SANDBOX_UNSAFE_DENIED", mode]);
      }
      const live = await minter.mint(unsafe);
      expect((await sink("admit").admit(`Bearer ${live.token}`, ctx)).effect).to.equal("unsafe");
    });
  });

  describe("the MCP gateway's mode of a call", () => {
    it("reads the mode the capability says (claim or sandbox typ); a live or unreadable token is live", async () => {
      expect(capabilityMode((await minter.mint(idempotent)).token)).to.equal(undefined);
      expect(capabilityMode((await minter.mint({ ...idempotent, mode: "replay" })).token)).to.equal("replay");
      expect(capabilityMode((await minter.mint({ ...idempotent, mode: "shadow" })).token)).to.equal("shadow");
      const sandboxTypNoMode = `${Buffer.from(JSON.stringify({ typ: "keycap-sandbox-capability+jwt" })).toString("base64url")}.e30.x`;
      expect(capabilityMode(sandboxTypNoMode), "never live").to.equal("shadow");
      expect(capabilityMode("not a token")).to.equal(undefined);
    });

    it("takes the mode from _meta field by field, else the gateway's; refuses a mode it does not know INVALID_RUN_MODE", () => {
      const defaults = { mode: "replay" as const, replayOf: "rec-1" };
      expect(requestedRunMode(undefined, defaults, "t")).to.deep.equal(defaults);
      expect(requestedRunMode({ "io.keycap/run-mode": "shadow", "io.keycap/shadows": "live-1" }, LIVE, "t")).to.deep.equal({
        mode: "shadow",
        shadows: "live-1",
      });
      expect(requestedRunMode({ "io.keycap/replay-of": "rec-2" }, defaults, "t")).to.deep.equal({ mode: "replay", replayOf: "rec-2" });
      for (const bad of [{ "io.keycap/run-mode": "dry" }, { "io.keycap/replay-of": 7 }]) {
        const err = (() => {
          try {
            requestedRunMode(bad, LIVE, "mcp:x/y");
          } catch (e) {
            return e;
          }
          return undefined;
        })();
        expect(err).to.be.instanceOf(McpError);
        expect((err as McpError).data).to.deep.include({ reason: "INVALID_RUN_MODE", tool_id: "mcp:x/y" });
      }
    });

    it("reads KEYCAP_MCP_RUN_MODE, KEYCAP_MCP_REPLAY_OF and KEYCAP_MCP_SHADOWS; a replay without its recorded run or an unknown mode stops the start", () => {
      expect(loadMcpOptions({}).runMode).to.deep.equal({ mode: "live" });
      expect(loadMcpOptions({ KEYCAP_MCP_RUN_MODE: "replay", KEYCAP_MCP_REPLAY_OF: "rec-1" }).runMode).to.deep.equal({ mode: "replay", replayOf: "rec-1" });
      expect(loadMcpOptions({ KEYCAP_MCP_RUN_MODE: "shadow", KEYCAP_MCP_SHADOWS: "live-1" }).runMode).to.deep.equal({ mode: "shadow", shadows: "live-1" });
      expect(() => loadMcpOptions({ KEYCAP_MCP_RUN_MODE: "replay" }))
        .to.throw(ConfigError)
        .with.property("setting", "KEYCAP_MCP_REPLAY_OF");
      expect(() => loadMcpOptions({ KEYCAP_MCP_RUN_MODE: "dry-run" }))
        .to.throw(ConfigError)
        .with.property("setting", "KEYCAP_MCP_RUN_MODE");
    });
  });
});
