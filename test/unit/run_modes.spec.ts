/**
 * Run modes (issue 30, ADR 0028), the parts that need no service: the sandbox capability's
 * typ and `mode` claim as the kernel mints them and as each kind of verifier reads them, and
 * the per-call rules of BeginCall's mode fields.
 */
import { sign } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import {
  CAPABILITY_SANDBOX_TYP,
  CAPABILITY_TYP,
  CapabilityRefusal,
  CapabilityVerifier,
  RemoteJwksSource,
  findClaimProblem,
} from "../../services/capability/src";
import { BeginCallRequest } from "../../gen/ts/keycap/kernel/v1/kernel";
import { KeycapError } from "../../services/common/src/errors";
import { RequestRules } from "../../services/common/src/request-rules";
import { CapabilityMinter, type MintInput } from "../../services/kernel/src/capability-minter";
import { checkRunMode, derivationRunId, sandboxModeOf, type RunModeName } from "../../services/kernel/src/run-mode";
import { loadOrCreateSigningKeys, type SigningKeys } from "../../services/kernel/src/signing-keys";

const T0 = Date.UTC(2030, 0, 1);
const now = (): number => T0;

function headerOf(token: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(token.split(".")[0] ?? "", "base64url").toString("utf8")) as Record<string, unknown>;
}

async function refusalOf(p: Promise<unknown>): Promise<CapabilityRefusal> {
  const caught = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(caught).to.be.instanceOf(CapabilityRefusal);
  return caught as CapabilityRefusal;
}

describe("run modes (ADR 0028)", () => {
  let dir: string;
  let keys: SigningKeys;
  let minter: CapabilityMinter;
  const verifier = (sandbox?: "refuse" | "verify"): CapabilityVerifier =>
    new CapabilityVerifier(new RemoteJwksSource(async () => JSON.stringify(keys.publicJwks())), { now, ...(sandbox ? { sandbox } : {}) });
  const input: MintInput = { principal: "rt", toolId: "pay", effect: "idempotent", callId: "c1", attempt: 1, key: "k".repeat(43) };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "keycap-modes-"));
    keys = await loadOrCreateSigningKeys(join(dir, "signing-key.json"), { retiredGraceSeconds: 905, now });
    minter = new CapabilityMinter(keys, { now });
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  describe("the capability", () => {
    it("is minted under the sandbox typ with a mode claim in shadow and replay, under the live typ without one when live", async () => {
      const live = await minter.mint(input);
      expect(headerOf(live.token)["typ"]).to.equal(CAPABILITY_TYP);
      expect(live.claims.mode).to.equal(undefined);
      for (const mode of ["shadow", "replay"] as const) {
        const sandboxed = await minter.mint({ ...input, mode });
        expect(headerOf(sandboxed.token)["typ"]).to.equal(CAPABILITY_SANDBOX_TYP);
        expect(sandboxed.claims.mode).to.equal(mode);
        // Re-signing the stored claims (a repeated BeginCall) keeps the typ and the mode.
        expect((await minter.mintWithClaims(sandboxed.claims)).token).to.equal(sandboxed.token);
      }
    });

    it("is refused WRONG_TOKEN_TYPE by a verifier that does not know modes (the default): never taken as live", async () => {
      const replay = await minter.mint({ ...input, mode: "replay" });
      const refusal = await refusalOf(verifier().verify(`Bearer ${replay.token}`));
      expect([refusal.reason, refusal.signatureVerified]).to.deep.equal(["WRONG_TOKEN_TYPE", false]);
      // A live capability still verifies there, without a mode.
      expect((await verifier().verify(`Bearer ${(await minter.mint(input)).token}`)).mode).to.equal(undefined);
    });

    it("verifies with its mode where the verifier knows modes (the ledger, the TS sink)", async () => {
      const shadow = await minter.mint({ ...input, mode: "shadow" });
      const verified = await verifier("verify").verify(`Bearer ${shadow.token}`);
      expect([verified.mode, verified.key, verified.tool_id]).to.deep.equal(["shadow", input.key, "pay"]);
    });

    it("is refused CLAIM_INVALID when the typ and the mode claim disagree, by any verifier", async () => {
      const claims = { ...(await minter.mint(input)).claims, mode: "replay" };
      const forge = (typ: string, payload: object): string => {
        const b = (v: unknown): string => Buffer.from(JSON.stringify(v)).toString("base64url");
        const signingInput = `${b({ alg: "EdDSA", typ, kid: keys.currentKid })}.${b(payload)}`;
        return `${signingInput}.${sign(null, Buffer.from(signingInput), keys.privateKey).toString("base64url")}`;
      };
      // A mode under the live typ: a verifier without modes would take it as live, so the kernel never signs one.
      for (const v of [verifier(), verifier("verify")]) {
        const r = await refusalOf(v.verify(`Bearer ${forge(CAPABILITY_TYP, claims)}`));
        expect([r.reason, r.metadata["claim"], r.signatureVerified]).to.deep.equal(["CLAIM_INVALID", "mode", true]);
      }
      const { mode: _mode, ...withoutMode } = claims;
      const r = await refusalOf(verifier("verify").verify(`Bearer ${forge(CAPABILITY_SANDBOX_TYP, withoutMode)}`));
      expect([r.reason, r.metadata["claim"]]).to.deep.equal(["CLAIM_INVALID", "mode"]);
    });

    it("has a mode claim of shadow or replay only", () => {
      const base: Record<string, unknown> = {
        iss: "i",
        aud: "a",
        sub: "s",
        tool_id: "t",
        effect: "unsafe",
        call_id: "c",
        attempt: 1,
        jti: "j",
        iat: 1,
        exp: 2,
      };
      expect(findClaimProblem({ ...base, mode: "shadow" })).to.equal(undefined);
      expect(findClaimProblem({ ...base, mode: "live" })?.claim).to.equal("mode");
      expect(findClaimProblem({ ...base, mode: 1 })?.claim).to.equal("mode");
    });
  });

  describe("BeginCall's mode fields, checked per call", () => {
    const check = (mode: RunModeName, runId: string, replayOfRunId = "", shadowsRunId = ""): string => {
      try {
        checkRunMode({ mode, runId, replayOfRunId, shadowsRunId });
        return "ok";
      } catch (err) {
        expect(err).to.be.instanceOf(KeycapError);
        return `${(err as KeycapError).reason} ${(err as KeycapError).metadata["field"]}`;
      }
    };

    it("requires a replay to name the recorded run and have a run id of its own", () => {
      expect(check("replay", "r2", "r1")).to.equal("ok");
      expect(check("replay", "r2")).to.equal("INVALID_RUN_MODE replay_of_run_id");
      expect(check("replay", "", "r1")).to.equal("INVALID_RUN_MODE run_id");
      expect(check("replay", "r1", "r1")).to.equal("INVALID_RUN_MODE run_id");
    });

    it("refuses ids given to a mode that does not take them", () => {
      expect(check("live", "r", "r0")).to.equal("INVALID_RUN_MODE replay_of_run_id");
      expect(check("shadow", "r", "", "r0")).to.equal("ok");
      expect(check("live", "r", "", "r0")).to.equal("INVALID_RUN_MODE shadows_run_id");
      expect(check("replay", "r", "r0", "r9")).to.equal("INVALID_RUN_MODE shadows_run_id");
    });

    it("leaves the ids' lengths to kernel.proto's rules, which refuse a long one with the mode's reason", () => {
      expect(check("shadow", "r", "", "x".repeat(257))).to.equal("ok");
      const rules = RequestRules.load().checkerOf("keycap.kernel.v1.BeginCallRequest");
      const refusal = (req: Partial<BeginCallRequest>): string => {
        const err = rules(BeginCallRequest.encode(BeginCallRequest.fromPartial(req)).finish());
        return err ? `${err.reason} ${err.metadata["field"]}` : "ok";
      };
      expect(refusal({ toolId: "t", shadowsRunId: "x".repeat(257) })).to.equal("INVALID_RUN_MODE shadows_run_id");
      expect(refusal({ toolId: "t", replayOfRunId: "é".repeat(257) })).to.equal("INVALID_RUN_MODE replay_of_run_id");
      expect(refusal({ toolId: "t", runId: "r".repeat(257) })).to.equal("INVALID_RUN_ID run_id");
      expect(refusal({ toolId: "t", shadowsRunId: "é".repeat(256), runId: "r".repeat(256) })).to.equal("ok");
    });

    it("derives a replay's keys in the recorded run's context; signs no mode for live", () => {
      expect(derivationRunId({ mode: "replay", runId: "r2", replayOfRunId: "r1" })).to.equal("r1");
      expect(derivationRunId({ mode: "shadow", runId: "s1", replayOfRunId: "" })).to.equal("s1");
      expect([sandboxModeOf("live"), sandboxModeOf("shadow"), sandboxModeOf("replay")]).to.deep.equal([undefined, "shadow", "replay"]);
    });
  });
});
