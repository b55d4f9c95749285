/**
 * Issue 10's acceptance: who may mint a capability. Real `keycap serve` processes on a
 * real MongoDB-protocol server; every refusal is read back through the admin API.
 */
import { credentials, Server, ServerCredentials, status, type UntypedServiceImplementation } from "@grpc/grpc-js";
import { expect } from "chai";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { AccessClient, AdminClient, defineTool, KernelClient, KeycapClientError, LedgerClient, tlsCredentials } from "../clients/ts/src";
import { BaselineServiceClient } from "../gen/ts/keycap/bench/v1/baseline";
import { AuthMethod } from "../gen/ts/keycap/kernel/v1/access";
import { KernelServiceService } from "../gen/ts/keycap/kernel/v1/kernel";
import type { Rejection } from "../gen/ts/keycap/ledger/v1/ledger_admin";
import { CapabilityMinter } from "../services/kernel/src/capability-minter";
import { loadOrCreateSigningKeys } from "../services/kernel/src/signing-keys";
import { refusal } from "./support/refusal";
import { runCli, serviceEnv, startService, TEST_RUNTIME_TOKEN, type ServiceProcess } from "./support/processes";
import { createTestPki, type TestPki } from "./support/tls-certs";
import { eventually } from "./support/eventually";

const ADMIN = "access-test-admin-token-0123456789";

function claimsOf(capability: string): Record<string, unknown> {
  const part = capability.split(".")[1] ?? "";
  return JSON.parse(Buffer.from(part, "base64url").toString("utf8")) as Record<string, unknown>;
}

describe("access: who may mint a capability (issue 10)", function () {
  this.timeout(120_000);
  let proc: ServiceProcess;
  let admin: AdminClient;
  let access: AccessClient;
  let runtime: KernelClient;

  before(async function () {
    proc = await startService("all", serviceEnv({ KEYCAP_ADMIN_TOKEN: ADMIN }));
    admin = new AdminClient(proc.endpoints.admin!, ADMIN);
    access = new AccessClient(proc.endpoints.kernel!, ADMIN);
    runtime = new KernelClient(proc.endpoints.kernel!, { ledgerAddress: proc.endpoints.ledger!, token: TEST_RUNTIME_TOKEN });
  });
  after(async function () {
    runtime?.close();
    access?.close();
    admin?.close();
    await proc?.stop();
  });

  /** The kernel's refusals of one tool, newest first. */
  async function kernelRefusals(toolId: string, n: number): Promise<Rejection[]> {
    return eventually(async () => {
      const rows = await admin.listRejections({ service: "kernel", toolId });
      return rows.length >= n ? rows : undefined;
    });
  }

  describe("a process without a valid runtime credential cannot obtain a capability", function () {
    const tool = defineTool({ id: "access.charge", effect: { kind: "idempotent", key: { fields: ["/order"] } } });
    let callId: string;

    before(async function () {
      await runtime.registerTool(tool);
      callId = (await runtime.begin(tool.id, { order: "A-1" })).callId;
    });

    for (const [label, token, reason] of [
      ["no credential", "", "PRINCIPAL_CREDENTIAL_MISSING"],
      ["a wrong credential", "keycap_rt_not-a-real-secret-000000", "PRINCIPAL_CREDENTIAL_INVALID"],
    ] as const) {
      it(`refuses BeginCall, ResumeCall and CompleteCall with ${label}: UNAUTHENTICATED ${reason}, recorded with peer and tool id`, async function () {
        const toolId = `${tool.id}.${reason.toLowerCase()}`;
        await runtime.registerTool({ ...tool, id: toolId });
        const own = await runtime.begin(toolId, { order: "B-1" });
        const stranger = new KernelClient(proc.endpoints.kernel!, { token });
        try {
          const begin = await refusal(stranger.beginCall(toolId, JSON.stringify({ order: "B-2" })));
          const resume = await refusal(stranger.resumeCall(own.callId));
          const complete = await refusal(stranger.completeCall(own.callId, "succeeded"));
          for (const e of [begin, resume, complete]) expect([e.codeName, e.reason]).to.deep.equal(["UNAUTHENTICATED", reason]);
          // Sent without a bearer: the refusal says where the default lookup looked (issue 33 item 1).
          if (token === "") for (const e of [begin, resume, complete]) expect(e.message).to.contain("this client sent no runtime credential");
        } finally {
          stranger.close();
        }
        const begun = (await kernelRefusals(toolId, 1)).filter((r) => r.reason === reason);
        expect(begun.map((r) => r.method)).to.include("BeginCall");
        for (const r of begun) {
          expect(r.service).to.equal("kernel");
          expect(r.code).to.equal("UNAUTHENTICATED");
          expect(r.peer).to.match(/127\.0\.0\.1/);
          expect(r.principal).to.equal("");
        }
        // Resume and complete name a call, not a tool: recorded with the call id.
        const all = await admin.listRejections({ service: "kernel", reason });
        expect(all.some((r) => r.method === "ResumeCall" && r.callId === own.callId)).to.equal(true);
        expect(all.some((r) => r.method === "CompleteCall" && r.callId === own.callId)).to.equal(true);
      });
    }

    it("refuses a revoked principal's secret within seconds: PRINCIPAL_REVOKED, recorded with its name", async function () {
      const created = await access.createPrincipal("access-revoked", "runtime");
      expect(created.secret).to.match(/^keycap_rt_/);
      await access.addGrant(tool.id, "access-revoked");
      const k = new KernelClient(proc.endpoints.kernel!, { token: created.secret });
      try {
        expect((await k.beginCall(tool.id, JSON.stringify({ order: "R-1" }))).capability).to.not.equal("");
        await access.revokePrincipal("access-revoked");
        const started = Date.now();
        const e = await eventually(async () => {
          try {
            await k.beginCall(tool.id, JSON.stringify({ order: "R-2" }));
            return undefined;
          } catch (err) {
            return KeycapClientError.from(err);
          }
        });
        expect([e.codeName, e.reason]).to.deep.equal(["UNAUTHENTICATED", "PRINCIPAL_REVOKED"]);
        expect(Date.now() - started).to.be.below(5000);
        expect((await refusal(k.resumeCall(callId))).reason).to.equal("PRINCIPAL_REVOKED");
        expect((await refusal(k.completeCall(callId, "failed"))).reason).to.equal("PRINCIPAL_REVOKED");
      } finally {
        k.close();
      }
      const rows = await admin.listRejections({ service: "kernel", reason: "PRINCIPAL_REVOKED" });
      expect(rows.some((r) => r.toolId === tool.id && r.method === "BeginCall" && r.peer !== "")).to.equal(true);
      // The record stays out of the ledger's own listing.
      expect(await admin.listRejections({ service: "ledger", reason: "PRINCIPAL_REVOKED" })).to.have.length(0);
    });

    it("never accepts a capability as a principal credential", async function () {
      const h = await runtime.beginCall(tool.id, JSON.stringify({ order: "C-1" }));
      const k = new KernelClient(proc.endpoints.kernel!, { token: h.capability });
      try {
        expect((await refusal(k.beginCall(tool.id, JSON.stringify({ order: "C-2" })))).reason).to.equal("PRINCIPAL_CREDENTIAL_INVALID");
      } finally {
        k.close();
      }
    });
  });

  it("a revocation through one kernel replica holds on another within seconds", async function () {
    const second = await startService("kernel", { ...proc.env, KEYCAP_DATA_DIR: fs.mkdtempSync(path.join(os.tmpdir(), "keycap-replica-")) });
    const tool = defineTool({ id: "access.replicated", effect: { kind: "unsafe" } });
    const created = await access.createPrincipal("access-replicated", "runtime");
    const viaSecond = new KernelClient(second.endpoints.kernel!, { token: created.secret });
    try {
      await viaSecond.registerTool(tool);
      expect((await viaSecond.beginCall(tool.id, "{}")).capability).to.not.equal("");
      await access.revokePrincipal("access-replicated"); // through the first replica
      const started = Date.now();
      const e = await eventually(async () =>
        viaSecond.beginCall(tool.id, "{}").then(
          () => undefined,
          (err: unknown) => KeycapClientError.from(err),
        ),
      );
      expect(e.reason).to.equal("PRINCIPAL_REVOKED");
      expect(Date.now() - started).to.be.below(5000);
    } finally {
      viaSecond.close();
      await second.stop();
    }
  });

  describe("per-tool grants", function () {
    const tool = defineTool({ id: "access.owned", effect: { kind: "idempotent", key: { fields: ["/n"] } } });
    let other: KernelClient;
    let ownCall: string;

    before(async function () {
      await runtime.registerTool(tool);
      ownCall = (await runtime.begin(tool.id, { n: 1 })).callId;
      const created = await access.createPrincipal("access-team-b", "runtime");
      other = new KernelClient(proc.endpoints.kernel!, { ledgerAddress: proc.endpoints.ledger!, token: created.secret });
    });
    after(() => other?.close());

    it("refuses begin, resume, complete and listing without a grant: PERMISSION_DENIED TOOL_NOT_GRANTED, recorded with the principal", async function () {
      const refusals = [
        await refusal(other.beginCall(tool.id, JSON.stringify({ n: 2 }))),
        await refusal(other.resumeCall(ownCall)),
        await refusal(other.completeCall(ownCall, "succeeded")),
        await refusal(other.listPendingCalls(tool.id)),
        await refusal(other.listIndeterminateCalls(tool.id)),
      ];
      for (const e of refusals) expect([e.codeName, e.reason]).to.deep.equal(["PERMISSION_DENIED", "TOOL_NOT_GRANTED"]);
      const rows = await kernelRefusals(tool.id, 5);
      const mine = rows.filter((r) => r.principal === "access-team-b" && r.reason === "TOOL_NOT_GRANTED");
      expect(new Set(mine.map((r) => r.method))).to.include.members(["BeginCall", "ResumeCall", "CompleteCall", "ListPendingCalls", "ListIndeterminateCalls"]);
      expect(mine.every((r) => r.code === "PERMISSION_DENIED" && r.peer !== "")).to.equal(true);
      // Unfiltered listings show only what the principal may see.
      expect((await other.listPendingCalls()).map((c) => c.toolId)).to.not.include(tool.id);
    });

    it("refuses a second principal re-registering or redefining the tool: TOOL_OWNED_BY_OTHER", async function () {
      for (const def of [tool, { ...tool, effect: { kind: "idempotent" as const, key: { fields: ["/n", "/m"] as [string, ...string[]] } } }]) {
        const e = await refusal(other.registerTool(def));
        expect([e.codeName, e.reason]).to.deep.equal(["PERMISSION_DENIED", "TOOL_OWNED_BY_OTHER"]);
        // The error names the fix, not only the cause (issue 33 item 9).
        expect(e.message).to.include(`keycap grants add ${tool.id} access-team-b`);
      }
      const owner = (await runtime.listTools()).find((t) => t.toolId === tool.id);
      expect(owner?.owner).to.equal("local-runtime");
    });

    it("shows a runtime only the tools it owns or is granted (ListTools, GetTool); operators see every tool (issue 32)", async function () {
      await other.registerTool(defineTool({ id: "access.team-b-own", effect: { kind: "unsafe" } }));
      const ids = async (k: KernelClient): Promise<string[]> => (await k.listTools()).map((t) => t.toolId);
      expect(await ids(other))
        .to.include("access.team-b-own")
        .and.not.include(tool.id);
      expect(await ids(runtime))
        .to.include(tool.id)
        .and.not.include("access.team-b-own");
      const e = await refusal(other.getTool(tool.id));
      expect([e.codeName, e.reason]).to.deep.equal(["PERMISSION_DENIED", "TOOL_NOT_GRANTED"]);
      const operator = new KernelClient(proc.endpoints.kernel!, { token: ADMIN });
      try {
        expect(await ids(operator)).to.include.members([tool.id, "access.team-b-own"]);
        expect((await operator.getTool(tool.id))?.owner).to.equal("local-runtime");
      } finally {
        operator.close();
      }
      // A grant makes the tool visible to the grantee, and its removal hides it again.
      await access.addGrant(tool.id, "access-team-b");
      await eventually(async () => ((await ids(other)).includes(tool.id) ? true : undefined));
      expect((await other.getTool(tool.id))?.toolId).to.equal(tool.id);
      await access.removeGrant(tool.id, "access-team-b");
      await eventually(async () => ((await ids(other)).includes(tool.id) ? undefined : true));
    });

    it("with the grant, begins, writes and completes; the capability's sub and the entry name that principal", async function () {
      await access.addGrant(tool.id, "access-team-b");
      const begun = await eventually(async () => other.beginCall(tool.id, JSON.stringify({ n: 3 })).catch(() => undefined));
      expect(claimsOf(begun.capability).sub).to.equal("access-team-b");
      expect(begun.call?.principal).to.equal("access-team-b");
      const ledger = new LedgerClient(proc.endpoints.ledger!);
      try {
        const written = await ledger.writeWithCapability(begun.capability, { key: begun.call!.key, payload: Buffer.from("paid") });
        expect(written.entry?.principal).to.equal("access-team-b");
      } finally {
        ledger.close();
      }
      const entry = await admin.getEntryByKey(begun.call!.key);
      expect(entry?.principal).to.equal("access-team-b");
      const h = { callId: begun.call!.callId };
      expect((await other.completeCall(h.callId, "succeeded")).alreadyCompleted).to.equal(false);
      expect((await other.resumeCall(ownCall)).call?.callId).to.equal(ownCall);
      // The call the owner began still names the owner.
      expect((await runtime.listPendingCalls(tool.id)).find((c) => c.callId === ownCall)?.principal).to.equal("local-runtime");
      await access.removeGrant(tool.id, "access-team-b");
      const e = await eventually(async () =>
        other.beginCall(tool.id, JSON.stringify({ n: 4 })).then(
          () => undefined,
          (err: unknown) => KeycapClientError.from(err),
        ),
      );
      expect(e.reason).to.equal("TOOL_NOT_GRANTED");
    });

    it("lets operators list and settle any call but never begin one", async function () {
      const operator = new KernelClient(proc.endpoints.kernel!, { token: ADMIN });
      try {
        expect((await operator.listPendingCalls(tool.id)).map((c) => c.callId)).to.include(ownCall);
        const e = await refusal(operator.beginCall(tool.id, JSON.stringify({ n: 5 })));
        expect([e.codeName, e.reason]).to.deep.equal(["PERMISSION_DENIED", "RUNTIME_REQUIRED"]);
        expect((await operator.completeCall(ownCall, "failed", "settled by hand")).alreadyCompleted).to.equal(false);
      } finally {
        operator.close();
      }
    });

    it("keeps principals and grants to operators: a runtime is refused OPERATOR_REQUIRED", async function () {
      const asRuntime = new AccessClient(proc.endpoints.kernel!, TEST_RUNTIME_TOKEN);
      try {
        expect((await asRuntime.whoAmI()).principal).to.equal("local-runtime");
        const e = await refusal(asRuntime.createPrincipal("sneaky", "operator"));
        expect([e.codeName, e.reason]).to.deep.equal(["PERMISSION_DENIED", "OPERATOR_REQUIRED"]);
        expect((await refusal(asRuntime.addGrant(tool.id, "local-runtime"))).reason).to.equal("OPERATOR_REQUIRED");
      } finally {
        asRuntime.close();
      }
    });

    it("manages principals and grants from the CLI; the secret is printed once", async function () {
      const env = { ...proc.env, KEYCAP_ADMIN_TOKEN: ADMIN };
      const kernel = ["--kernel", proc.endpoints.kernel!];
      const created = await runCli(["principals", "create", "cli-runner", "--role", "runtime", ...kernel, "--json"], env);
      expect(created.code, created.stderr).to.equal(0);
      const secret = (JSON.parse(created.stdout) as { secret: string }).secret;
      expect(secret).to.match(/^keycap_rt_/);
      const listed = await runCli(["principals", "list", ...kernel], env);
      expect(listed.stdout).to.contain("cli-runner").and.not.contain(secret);
      expect((await runCli(["grants", "add", tool.id, "cli-runner", ...kernel], env)).code).to.equal(0);
      const grants = JSON.parse((await runCli(["grants", "list", "--tool", tool.id, ...kernel, "--json"], env)).stdout) as { principal: string }[];
      expect(grants.map((g) => g.principal)).to.include("cli-runner");
      const k = new KernelClient(proc.endpoints.kernel!, { token: secret });
      try {
        expect((await k.beginCall(tool.id, JSON.stringify({ n: 9 }))).capability).to.not.equal("");
      } finally {
        k.close();
      }
      expect((await runCli(["principals", "revoke", "cli-runner", ...kernel], env)).code).to.equal(0);
      const rejections = await runCli(["rejections", "--service", "kernel", "--admin", proc.endpoints.admin!, "--json"], env);
      expect(rejections.code, rejections.stderr).to.equal(0);
      expect((JSON.parse(rejections.stdout) as Rejection[]).every((r) => r.service === "kernel")).to.equal(true);
    });
  });

  it("refuses forged page tokens on the listings, with a reason", async function () {
    const forged = Buffer.from(JSON.stringify({ t: 1e300, id: "x" })).toString("base64url");
    const forgedCalls = Buffer.from(JSON.stringify({ t: "x", i: "y" })).toString("base64url");
    for (const p of [
      () => admin.listRejectionsPage({}, forged),
      () => admin.listEntriesPage("", forged),
      () => runtime.listPendingCallsPage("", forgedCalls),
    ]) {
      const e = await refusal(p());
      expect([e.codeName, e.reason]).to.deep.equal(["INVALID_ARGUMENT", "INVALID_PAGE_TOKEN"]);
    }
  });

  it("offers no way to start the baseline service from keycap serve", async function () {
    const r = await runCli(["serve", "baseline"], serviceEnv());
    expect(r.code).to.not.equal(0);
    expect(r.stderr).to.contain("unknown service");
    const ledger = await startService("ledger", serviceEnv({ KEYCAP_BENCH_BASELINE: "1" }));
    const client = new BaselineServiceClient(ledger.endpoints.ledger!, credentials.createInsecure());
    try {
      const code = await new Promise<number>((resolve) => client.write({ key: "k", payload: Buffer.from("x") }, (err) => resolve(err ? err.code : status.OK)));
      expect(code).to.equal(status.UNIMPLEMENTED);
    } finally {
      client.close();
      await ledger.stop();
    }
  });
});

describe("access: TLS on every listener (issue 10)", function () {
  this.timeout(120_000);
  let dir: string;
  let pki: TestPki;

  before(function () {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-pki-"));
    pki = createTestPki(dir);
  });
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  function tlsEnv(extra: Record<string, string> = {}): Record<string, string> {
    return serviceEnv({
      KEYCAP_ADMIN_TOKEN: ADMIN,
      KEYCAP_TLS_CERT_FILE: pki.server.cert,
      KEYCAP_TLS_KEY_FILE: pki.server.key,
      KEYCAP_TLS_CA_FILE: pki.ca.cert,
      ...extra,
    });
  }

  describe("server TLS, client certificates required on the kernel", function () {
    let proc: ServiceProcess;
    before(async function () {
      const mapped = "spiffe://keycap.test/runtime/tls-runner";
      proc = await startService(
        "all",
        tlsEnv({
          KEYCAP_KERNEL_CLIENT_AUTH: "require",
          KEYCAP_TLS_CLIENT_CA_FILE: pki.ca.cert,
          // The ledger's key fetch must present a certificate too when the kernel requires one.
          KEYCAP_TLS_CLIENT_CERT_FILE: pki.server.cert,
          KEYCAP_TLS_CLIENT_KEY_FILE: pki.server.key,
          KEYCAP_CERT_PRINCIPALS: JSON.stringify({ [mapped]: "tls-runner", "CN=cn-runner": "tls-runner" }),
        }),
      );
      const a = new AccessClient(proc.endpoints.kernel!, ADMIN, { tls: { caFile: pki.ca.cert, ...certOf("operator-client") } });
      try {
        await a.createPrincipal("tls-runner", "runtime");
      } finally {
        a.close();
      }
    });
    after(async () => proc?.stop());

    function certOf(name: string, opts: { uri?: boolean } = {}): { certFile: string; keyFile: string } {
      const c = pki.clientFor(name, opts);
      return { certFile: c.cert, keyFile: c.key };
    }

    it("a client without the CA fails the handshake; with it the whole call succeeds", async function () {
      for (const tls of [undefined, {}, { caFile: pki.otherCa.cert }]) {
        const k = new AccessClient(proc.endpoints.kernel!, TEST_RUNTIME_TOKEN, tls ? { tls: { ...tls, ...certOf("x") } } : {});
        try {
          expect((await refusal(k.whoAmI({ timeoutMs: 3000 }))).codeName).to.be.oneOf(["UNAVAILABLE", "DEADLINE_EXCEEDED"]);
        } finally {
          k.close();
        }
      }
      const ledgerPlain = new LedgerClient(proc.endpoints.ledger!);
      const adminPlain = new AdminClient(proc.endpoints.admin!, ADMIN);
      try {
        expect((await refusal(adminPlain.stats({ timeoutMs: 3000 }))).codeName).to.be.oneOf(["UNAVAILABLE", "DEADLINE_EXCEEDED"]);
      } finally {
        ledgerPlain.close();
        adminPlain.close();
      }
      const tls = { caFile: pki.ca.cert, ...certOf("unmapped-for-bearer") };
      const k = new KernelClient(proc.endpoints.kernel!, { ledgerAddress: proc.endpoints.ledger!, token: TEST_RUNTIME_TOKEN, tls });
      try {
        await k.registerTool(defineTool({ id: "tls.charge", effect: { kind: "idempotent", key: { fields: ["/id"] } } }));
        const h = await k.begin("tls.charge", { id: 1 });
        expect((await h.write("ok")).duplicate).to.equal(false);
        await h.complete("succeeded");
      } finally {
        k.close();
      }
      const a = new AdminClient(proc.endpoints.admin!, ADMIN, tlsCredentials({ caFile: pki.ca.cert }));
      try {
        expect((await a.stats()).entries).to.be.greaterThan(0);
      } finally {
        a.close();
      }
    });

    it("without a client certificate the kernel refuses the connection; a mapped one is that principal", async function () {
      const none = new AccessClient(proc.endpoints.kernel!, TEST_RUNTIME_TOKEN, { tls: { caFile: pki.ca.cert } });
      try {
        expect((await refusal(none.whoAmI({ timeoutMs: 3000 }))).codeName).to.be.oneOf(["UNAVAILABLE", "DEADLINE_EXCEEDED"]);
      } finally {
        none.close();
      }
      for (const [name, opts, identity] of [
        ["tls-runner", {}, "spiffe://keycap.test/runtime/tls-runner"],
        ["cn-runner", { uri: false }, "CN=cn-runner"],
      ] as const) {
        const mtls = new AccessClient(proc.endpoints.kernel!, "", { tls: { caFile: pki.ca.cert, ...certOf(name, opts) } });
        try {
          const me = await mtls.whoAmI();
          expect(me).to.include({ principal: "tls-runner", authMethod: AuthMethod.AUTH_METHOD_MTLS, certificateIdentity: identity });
        } finally {
          mtls.close();
        }
      }
      const unmapped = new AccessClient(proc.endpoints.kernel!, "", { tls: { caFile: pki.ca.cert, ...certOf("nobody") } });
      try {
        const e = await refusal(unmapped.whoAmI());
        expect([e.codeName, e.reason]).to.deep.equal(["UNAUTHENTICATED", "CERTIFICATE_NOT_MAPPED"]);
      } finally {
        unmapped.close();
      }
      // A certificate from another CA does not even connect.
      const foreign = new AccessClient(proc.endpoints.kernel!, "", {
        tls: {
          caFile: pki.ca.cert,
          ...(() => {
            const c = pki.clientFor("tls-runner", { ca: pki.otherCa });
            return { certFile: c.cert, keyFile: c.key };
          })(),
        },
      });
      try {
        expect((await refusal(foreign.whoAmI({ timeoutMs: 3000 }))).codeName).to.be.oneOf(["UNAVAILABLE", "DEADLINE_EXCEEDED"]);
      } finally {
        foreign.close();
      }
    });

    it("the CLI takes --ca, --cert and --key", async function () {
      const env = { ...proc.env, KEYCAP_ADMIN_TOKEN: ADMIN, KEYCAP_TLS_CA_FILE: "" };
      const c = pki.clientFor("cli-client");
      const ok = await runCli(["principals", "list", "--kernel", proc.endpoints.kernel!, "--ca", pki.ca.cert, "--cert", c.cert, "--key", c.key, "--json"], env);
      expect(ok.code, ok.stderr).to.equal(0);
      expect((JSON.parse(ok.stdout) as { name: string }[]).map((p) => p.name)).to.include("tls-runner");
      const bad = await runCli(["principals", "list", "--kernel", proc.endpoints.kernel!, "--json"], env);
      expect(bad.code).to.not.equal(0);
      expect(bad.stderr).to.contain("cannot reach the kernel");
    });
  });

  it("re-reads the listener certificates on SIGHUP: new connections get the new certificate", async function () {
    const live = fs.mkdtempSync(path.join(dir, "live-"));
    const cert = path.join(live, "server.crt");
    const key = path.join(live, "server.key");
    fs.copyFileSync(pki.server.cert, cert);
    fs.copyFileSync(pki.server.key, key);
    const proc = await startService("kernel", tlsEnv({ KEYCAP_TLS_CERT_FILE: cert, KEYCAP_TLS_KEY_FILE: key }));
    const who = async (caFile: string): Promise<string> => {
      const a = new AccessClient(proc.endpoints.kernel!, TEST_RUNTIME_TOKEN, { tls: { caFile } });
      try {
        return (await a.whoAmI({ timeoutMs: 3000 })).principal;
      } catch (err) {
        return KeycapClientError.from(err).codeName;
      } finally {
        a.close();
      }
    };
    try {
      expect(await who(pki.ca.cert)).to.equal("local-runtime");
      expect(await who(pki.otherCa.cert)).to.be.oneOf(["UNAVAILABLE", "DEADLINE_EXCEEDED"]);
      // Rotate to a certificate from the other CA, then SIGHUP.
      fs.copyFileSync(pki.otherServer.cert, cert);
      fs.copyFileSync(pki.otherServer.key, key);
      proc.child.kill("SIGHUP");
      expect(await eventually(async () => ((await who(pki.otherCa.cert)) === "local-runtime" ? true : undefined))).to.equal(true);
      expect(await who(pki.ca.cert)).to.be.oneOf(["UNAVAILABLE", "DEADLINE_EXCEEDED"]);
      // A file that does not load keeps the certificate in use.
      fs.writeFileSync(cert, "not a certificate");
      proc.child.kill("SIGHUP");
      await new Promise((r) => setTimeout(r, 500));
      expect(proc.child.exitCode).to.equal(null);
      expect(await who(pki.otherCa.cert)).to.equal("local-runtime");
    } finally {
      await proc.stop();
    }
  });

  /** A key server posing as the kernel: it serves its own JWKS over TLS with `cert`. */
  async function fakeKernel(cert: { cert: string; key: string }): Promise<{ address: string; minter: CapabilityMinter; stop(): void }> {
    const keys = await loadOrCreateSigningKeys(path.join(fs.mkdtempSync(path.join(dir, "fake-")), "keys.json"), { retiredGraceSeconds: 60 });
    const server = new Server();
    const impl: UntypedServiceImplementation = {
      getSigningKeys: (_call: unknown, cb: (e: null, r: { jwksJson: string; currentKeyId: string }) => void) =>
        cb(null, { jwksJson: JSON.stringify(keys.publicJwks()), currentKeyId: keys.currentKid }),
    };
    server.addService(KernelServiceService, impl);
    const creds = ServerCredentials.createSsl(null, [{ cert_chain: fs.readFileSync(cert.cert), private_key: fs.readFileSync(cert.key) }], false);
    const port = await new Promise<number>((resolve, reject) => server.bindAsync("127.0.0.1:0", creds, (err, p) => (err ? reject(err) : resolve(p))));
    return { address: `127.0.0.1:${port}`, minter: new CapabilityMinter(keys, {}), stop: () => server.forceShutdown() };
  }

  /** What a ledger pinned to the test CA answers a capability of `kernel`'s. */
  async function ledgerVerdict(kernel: { address: string; minter: CapabilityMinter }): Promise<string> {
    const ledger = await startService("ledger", tlsEnv({ KEYCAP_KERNEL_ADDRESS: kernel.address }));
    const client = new LedgerClient(ledger.endpoints.ledger!, tlsCredentials({ caFile: pki.ca.cert }));
    try {
      const { token } = await kernel.minter.mint({
        principal: "local-runtime",
        toolId: "fake.tool",
        effect: "idempotent",
        callId: "fake-1",
        attempt: 1,
        key: "k-fake",
      });
      // One attempt: the verdict asked for is the ledger's, not the client's retries racing
      // their deadline while the ledger keeps (rightly) answering UNAVAILABLE.
      return await client.writeWithCapability(token, { key: "k-fake", payload: Buffer.from("x") }, { retry: false }).then(
        () => "written",
        (err: unknown) => `${KeycapClientError.from(err).codeName} ${KeycapClientError.from(err).reason}`,
      );
    } finally {
      client.close();
      await ledger.stop();
    }
  }

  it("a fake kernel on the ledger's kernel address, with its own keys over TLS from another CA, gets none of its capabilities accepted", async function () {
    const fake = await fakeKernel(pki.otherServer);
    try {
      expect(await ledgerVerdict(fake)).to.equal("UNAVAILABLE SIGNING_KEYS_UNAVAILABLE");
    } finally {
      fake.stop();
    }
    // Control: the same key server with a certificate of the pinned CA is believed, so the
    // refusal above is the CA check, not a broken fetch.
    const trusted = await fakeKernel(pki.server);
    try {
      expect(await ledgerVerdict(trusted)).to.equal("written");
    } finally {
      trusted.stop();
    }
  });

  it("refuses to start in plaintext off loopback, naming the setting, unless told to", async function () {
    const kernelOff = await runCli(["serve", "kernel"], serviceEnv({ KEYCAP_KERNEL_LISTEN: "0.0.0.0:0" }));
    expect(kernelOff.code).to.equal(2);
    expect(kernelOff.stderr.trim().split("\n")).to.have.length(1);
    expect(kernelOff.stderr).to.contain("KEYCAP_KERNEL_LISTEN").and.contain("KEYCAP_ALLOW_PLAINTEXT");
    const ledgerToRemoteKernel = await runCli(["serve", "ledger"], serviceEnv({ KEYCAP_KERNEL_ADDRESS: "10.255.0.1:50051", KEYCAP_ALLOW_PLAINTEXT: "1" }));
    expect(ledgerToRemoteKernel.code).to.equal(2);
    expect(ledgerToRemoteKernel.stderr).to.contain("KEYCAP_KERNEL_ADDRESS");
    const allowed = await startService("kernel", serviceEnv({ KEYCAP_KERNEL_LISTEN: "0.0.0.0:0", KEYCAP_ALLOW_PLAINTEXT: "1" }));
    await allowed.stop();
  });
});
