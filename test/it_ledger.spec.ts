import { status } from "@grpc/grpc-js";
import { expect } from "chai";
import { createHmac, randomBytes } from "node:crypto";
import { mkdtemp, readFile, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import * as path from "node:path";
import type { BeginCallResponse } from "../gen/ts/keycap/kernel/v1/kernel";
import type { Rejection } from "../gen/ts/keycap/ledger/v1/ledger_admin";
import { EffectKind } from "../gen/ts/keycap/effect/v1/effect";
import {
  AdminCalls,
  LedgerCalls,
  capabilityHeader,
  foreignKey,
  idempotentClaims,
  refusalOf,
  signEd25519,
  startLedgerStack,
  unsignedToken,
  type LedgerStack,
} from "./support/ledger-harness";
import { freshDatabaseName } from "./support/mongo";
import { serviceEnv, startService, type ServiceProcess } from "./support/processes";
import { LedgerClient } from "../clients/ts/src";
import { refusal } from "./support/refusal";

const run = randomBytes(3).toString("hex");
const ORDERS = `orders-${run}`; // Idempotent, keyed on /order_id
const SHIPMENTS = `shipments-${run}`; // Queryable, request id at /request_id
const EMAILS = `emails-${run}`; // Unsafe

function payload(text: string): Buffer {
  return Buffer.from(text, "utf8");
}

describe("ledger: capability-enforced writes, key-only exactly-once, per-tool refusal audit", function () {
  this.timeout(30_000);
  let s: LedgerStack;

  before(async function () {
    this.timeout(60_000);
    s = await startLedgerStack();
    await s.kernelCalls.registerIdempotent(ORDERS, ["/order_id"]);
    await s.kernelCalls.registerQueryable(SHIPMENTS, "/request_id");
    await s.kernelCalls.registerUnsafe(EMAILS);
  });

  after(async function () {
    await s?.stop();
  });

  /** BeginCall for an order: the kernel derives the key from /order_id. */
  function beginOrder(orderId: string, extra: Record<string, unknown> = {}): Promise<BeginCallResponse> {
    return s.kernelCalls.beginCall(ORDERS, { order_id: orderId, amount_cents: 1200, ...extra });
  }

  async function entriesOf(toolId: string): Promise<number> {
    return (await s.admin.listEntries({ toolId, pageSize: 1000 })).entries.length;
  }

  /** Entries of the tool stored under `key` (the ledger is asked for all of them, not by key). */
  async function entriesUnder(toolId: string, key: string): Promise<number> {
    return (await s.admin.listEntries({ toolId, pageSize: 1000 })).entries.filter((e) => e.key === key).length;
  }

  /**
   * Runs a call that must be refused with `code`/`reason`, and checks that nothing was
   * written and that exactly one refusal with that reason was recorded. With `toolId`,
   * returns the newest refusal recorded against that tool id.
   */
  async function expectRefusedAndRecorded(
    call: () => Promise<unknown>,
    want: { code: number; reason: string; toolId?: string },
  ): Promise<Rejection | undefined> {
    const before = await s.admin.getStats();
    const r = await refusalOf(call());
    expect({ code: r.code, reason: r.reason }, r.details).to.deep.equal({ code: want.code, reason: want.reason });
    const after = await s.admin.getStats();
    expect(after.entries, "nothing is written").to.equal(before.entries);
    expect(after.rejectionsByReason[want.reason] ?? 0, "the refusal is recorded").to.equal((before.rejectionsByReason[want.reason] ?? 0) + 1);
    if (want.toolId === undefined) return undefined;
    const { rejections } = await s.admin.listRejections({ toolId: want.toolId, pageSize: 1 });
    expect(rejections, `a refusal recorded against ${want.toolId}`).to.have.length(1);
    expect(rejections[0]!.reason).to.equal(want.reason);
    return rejections[0];
  }

  describe("Idempotent tools", function () {
    it("accepts a write under the kernel-supplied key and holds exactly one entry under it", async function () {
      const begun = await beginOrder("o-1");
      const key = begun.call!.key;
      expect(key).to.match(/^[A-Za-z0-9_-]{43}$/);
      const res = await s.ledgerCalls.write(begun.capability, { key, payload: payload("charge o-1") });
      expect(res.duplicate).to.equal(false);
      expect(res.payloadMismatch).to.equal(false);
      expect(res.entry).to.deep.include({
        toolId: ORDERS,
        key,
        requestId: "",
        callId: begun.call!.callId,
        attempt: 1,
        effectKind: EffectKind.EFFECT_KIND_IDEMPOTENT,
        duplicateCount: 0,
      });
      expect(res.entry!.entryId).to.be.a("string").and.not.equal("");
      expect(res.entry!.payloadSha256).to.match(/^[0-9a-f]{64}$/);
      const stored = (await s.admin.getEntry({ key })).entry!;
      expect(stored.entryId).to.equal(res.entry!.entryId);
      expect(stored.payload.toString()).to.equal("charge o-1");
      expect((await s.admin.getEntry({ entryId: stored.entryId })).entry!.key).to.equal(key);
      expect(await entriesUnder(ORDERS, key)).to.equal(1);
    });

    it("answers the same arguments again with the identical key, duplicate = true and the original entry id; still one entry", async function () {
      const first = await beginOrder("o-1");
      const again = await beginOrder("o-1", { note: "fields outside the derivation do not change the key" });
      expect(again.call!.callId).to.not.equal(first.call!.callId);
      expect(again.call!.key).to.equal(first.call!.key);
      const original = (await s.admin.getEntry({ key: first.call!.key })).entry!;
      const res = await s.ledgerCalls.write(again.capability, { key: again.call!.key, payload: payload("charge o-1") });
      expect(res.duplicate).to.equal(true);
      expect(res.payloadMismatch).to.equal(false);
      expect(res.entry!.entryId).to.equal(original.entryId);
      expect(res.entry!.capabilityId, "the original entry, not the retry's").to.equal(original.capabilityId);
      const counted = (await s.admin.getEntry({ key: first.call!.key })).entry!;
      expect(counted.duplicateCount, "the retry is counted against the entry").to.equal(original.duplicateCount + 1);
      expect(await entriesUnder(ORDERS, first.call!.key)).to.equal(1);
    });

    it("dedupes by key only: the same key with another payload is still one entry, flagged as a payload mismatch", async function () {
      const begun = await beginOrder("o-2");
      const key = begun.call!.key;
      const first = await s.ledgerCalls.write(begun.capability, { key, payload: payload("charge 12.00") });
      const before = await s.admin.getStats();
      const other = await s.ledgerCalls.write(begun.capability, { key, payload: payload("charge 99.00") });
      expect(other.duplicate).to.equal(true);
      expect(other.payloadMismatch).to.equal(true);
      expect(other.entry!.entryId).to.equal(first.entry!.entryId);
      expect(other.entry!.payload.toString(), "the first payload is kept").to.equal("charge 12.00");
      const stored = (await s.admin.getEntry({ key })).entry!;
      expect(stored).to.deep.include({ payloadMismatch: true, payloadMismatchCount: 1, duplicateCount: 1 });
      const after = await s.admin.getStats();
      expect(after.payloadMismatches).to.equal(before.payloadMismatches + 1);
      expect(after.entries).to.equal(before.entries);
      // Sending the original payload again is a plain duplicate, not another mismatch.
      const same = await s.ledgerCalls.write(begun.capability, { key, payload: payload("charge 12.00") });
      expect(same.payloadMismatch).to.equal(false);
      expect((await s.admin.getEntry({ key })).entry!.payloadMismatchCount).to.equal(1);
    });

    it("keeps two keys with the same payload as two entries", async function () {
      const a = await beginOrder("o-3");
      const b = await beginOrder("o-4");
      expect(a.call!.key).to.not.equal(b.call!.key);
      const before = await entriesOf(ORDERS);
      const ra = await s.ledgerCalls.write(a.capability, { key: a.call!.key, payload: payload("same") });
      const rb = await s.ledgerCalls.write(b.capability, { key: b.call!.key, payload: payload("same") });
      expect([ra.duplicate, rb.duplicate]).to.deep.equal([false, false]);
      expect(ra.entry!.entryId).to.not.equal(rb.entry!.entryId);
      expect(await entriesOf(ORDERS)).to.equal(before + 2);
    });

    it("refuses a write under a key the kernel did not derive (PERMISSION_DENIED KEY_MISMATCH), and records it against the verified tool with both keys", async function () {
      const begun = await beginOrder("o-5");
      const outOfBand = (await beginOrder("o-999-never-begun-for-this-capability")).call!.key;
      const rec = await expectRefusedAndRecorded(() => s.ledgerCalls.write(begun.capability, { key: outOfBand, payload: payload("x") }), {
        code: status.PERMISSION_DENIED,
        reason: "KEY_MISMATCH",
        toolId: ORDERS,
      });
      expect(rec).to.deep.include({
        toolId: ORDERS,
        toolIdVerified: true,
        code: "PERMISSION_DENIED",
        method: "Write",
        attemptedKey: outOfBand,
        capabilityKey: begun.call!.key,
        callId: begun.call!.callId,
        effectKind: EffectKind.EFFECT_KIND_IDEMPOTENT,
        count: 1,
      });
      expect(rec!.capabilityId).to.not.equal("");
      expect(rec!.keyId).to.equal((await s.kernelCalls.getSigningKeys()).currentKeyId);
      expect(rec!.peer).to.match(/^127\.0\.0\.1:\d+$/);
      expect(rec!.rejectedAt).to.be.instanceOf(Date);
      await refusalOf(s.admin.getEntry({ key: outOfBand })).then((r) => expect(r.reason).to.equal("ENTRY_NOT_FOUND"));
    });

    it("refuses an idempotent write that carries no key (PERMISSION_DENIED KEY_MISSING) and one that carries a request id instead", async function () {
      const begun = await beginOrder("o-6");
      await expectRefusedAndRecorded(() => s.ledgerCalls.write(begun.capability, { payload: payload("x") }), {
        code: status.PERMISSION_DENIED,
        reason: "KEY_MISSING",
        toolId: ORDERS,
      });
      await expectRefusedAndRecorded(() => s.ledgerCalls.write(begun.capability, { requestId: "r", payload: payload("x") }), {
        code: status.PERMISSION_DENIED,
        reason: "EFFECT_CLASS_MISMATCH",
        toolId: ORDERS,
      });
    });
  });

  describe("each bad capability is refused with its own reason, recorded against what it claims, and nothing is written", function () {
    const forged = (name: string): string => `forged-${name}-${run}`;
    const unauth = status.UNAUTHENTICATED;

    it("no capability at all: CAPABILITY_MISSING", async function () {
      await expectRefusedAndRecorded(() => s.ledgerCalls.write(undefined, { key: "k", payload: payload("x") }), { code: unauth, reason: "CAPABILITY_MISSING" });
    });

    it("garbage instead of a capability: CAPABILITY_MALFORMED", async function () {
      await expectRefusedAndRecorded(() => s.ledgerCalls.write("garbage", { key: "k", payload: payload("x") }), {
        code: unauth,
        reason: "CAPABILITY_MALFORMED",
      });
    });

    it("a valid shape signed by a foreign Ed25519 key under the kernel's key id: BAD_SIGNATURE, tool id not verified", async function () {
      const kid = (await s.signingKeys()).currentKid;
      const token = signEd25519(capabilityHeader(kid), idempotentClaims(forged("foreign"), "k1"), foreignKey());
      const rec = await expectRefusedAndRecorded(() => s.ledgerCalls.write(token, { key: "k1", payload: payload("x") }), {
        code: unauth,
        reason: "BAD_SIGNATURE",
        toolId: forged("foreign"),
      });
      expect(rec).to.deep.include({ toolIdVerified: false, attemptedKey: "k1", capabilityKey: "k1", keyId: kid, code: "UNAUTHENTICATED" });
    });

    it("alg none: ALGORITHM_NOT_ALLOWED", async function () {
      const kid = (await s.signingKeys()).currentKid;
      const token = unsignedToken(capabilityHeader(kid, "none"), idempotentClaims(forged("none"), "k"));
      const rec = await expectRefusedAndRecorded(() => s.ledgerCalls.write(token, { key: "k", payload: payload("x") }), {
        code: unauth,
        reason: "ALGORITHM_NOT_ALLOWED",
        toolId: forged("none"),
      });
      expect(rec!.toolIdVerified).to.equal(false);
    });

    it("HS256 keyed with the kernel's public key: ALGORITHM_NOT_ALLOWED", async function () {
      const { jwksJson } = await s.kernelCalls.getSigningKeys();
      const jwk = (JSON.parse(jwksJson) as { keys: { x: string; kid: string }[] }).keys[0]!;
      const header = capabilityHeader(jwk.kid, "HS256");
      const claims = idempotentClaims(forged("hs256"), "k");
      const input = unsignedToken(header, claims).slice(0, -1);
      const mac = createHmac("sha256", Buffer.from(jwk.x, "base64url")).update(input).digest("base64url");
      await expectRefusedAndRecorded(() => s.ledgerCalls.write(`${input}.${mac}`, { key: "k", payload: payload("x") }), {
        code: unauth,
        reason: "ALGORITHM_NOT_ALLOWED",
        toolId: forged("hs256"),
      });
    });

    it("expired (minted with the kernel's own key by a clock an hour behind): EXPIRED, tool id verified", async function () {
      const minter = await s.minter({ now: () => Date.now() - 3600_000 });
      const { token } = await minter.mint({
        principal: "test-runtime",
        toolId: forged("expired"),
        effect: "idempotent",
        callId: "c-exp",
        attempt: 1,
        key: "k",
      });
      const rec = await expectRefusedAndRecorded(() => s.ledgerCalls.write(token, { key: "k", payload: payload("x") }), {
        code: unauth,
        reason: "EXPIRED",
        toolId: forged("expired"),
      });
      expect(rec).to.deep.include({ toolIdVerified: true, callId: "c-exp", capabilityKey: "k" });
    });

    it("addressed to another audience: WRONG_AUDIENCE", async function () {
      const minter = await s.minter({ audience: "some-other-ledger" });
      const { token } = await minter.mint({ principal: "test-runtime", toolId: forged("aud"), effect: "idempotent", callId: "c-aud", attempt: 1, key: "k" });
      const rec = await expectRefusedAndRecorded(() => s.ledgerCalls.write(token, { key: "k", payload: payload("x") }), {
        code: unauth,
        reason: "WRONG_AUDIENCE",
        toolId: forged("aud"),
      });
      expect(rec!.toolIdVerified).to.equal(true);
    });

    it("audience as an array that includes this ledger: WRONG_AUDIENCE", async function () {
      const keys = await s.signingKeys();
      const claims = idempotentClaims(forged("audarray"), "k", { aud: ["keycap-ledger", "another"] });
      const token = signEd25519(capabilityHeader(keys.currentKid), claims, keys.privateKey);
      await expectRefusedAndRecorded(() => s.ledgerCalls.write(token, { key: "k", payload: payload("x") }), {
        code: unauth,
        reason: "WRONG_AUDIENCE",
        toolId: forged("audarray"),
      });
    });

    it("signed under a key id the kernel never published: UNKNOWN_KEY_ID", async function () {
      const token = signEd25519(capabilityHeader("no-such-kid"), idempotentClaims(forged("kid"), "k"), foreignKey());
      const rec = await expectRefusedAndRecorded(() => s.ledgerCalls.write(token, { key: "k", payload: payload("x") }), {
        code: unauth,
        reason: "UNKNOWN_KEY_ID",
        toolId: forged("kid"),
      });
      expect(rec!.keyId).to.equal("no-such-kid");
    });

    it("missing a required claim (call_id), signed by the kernel's key: CLAIM_MISSING", async function () {
      const keys = await s.signingKeys();
      const claims = idempotentClaims(forged("claim"), "k");
      delete claims["call_id"];
      const token = signEd25519(capabilityHeader(keys.currentKid), claims, keys.privateKey);
      await expectRefusedAndRecorded(() => s.ledgerCalls.write(token, { key: "k", payload: payload("x") }), {
        code: unauth,
        reason: "CLAIM_MISSING",
        toolId: forged("claim"),
      });
    });

    it("a genuine capability whose payload was tampered with (key swapped): BAD_SIGNATURE", async function () {
      const begun = await beginOrder("o-tamper");
      const [h, p, sig] = begun.capability.split(".") as [string, string, string];
      const claims = JSON.parse(Buffer.from(p, "base64url").toString()) as Record<string, unknown>;
      claims["key"] = "a-key-of-my-choosing";
      claims["tool_id"] = forged("tamper");
      const token = `${h}.${Buffer.from(JSON.stringify(claims)).toString("base64url")}.${sig}`;
      await expectRefusedAndRecorded(() => s.ledgerCalls.write(token, { key: "a-key-of-my-choosing", payload: payload("x") }), {
        code: unauth,
        reason: "BAD_SIGNATURE",
        toolId: forged("tamper"),
      });
    });

    it("an Unsafe capability used a second time: PERMISSION_DENIED CAPABILITY_REUSED, one entry", async function () {
      const begun = await s.kernelCalls.beginCall(EMAILS, { to: "a@example.com", body: "hi" });
      const first = await s.ledgerCalls.write(begun.capability, { payload: payload("send hi") });
      expect(first.duplicate).to.equal(false);
      const rec = await expectRefusedAndRecorded(() => s.ledgerCalls.write(begun.capability, { payload: payload("send hi") }), {
        code: status.PERMISSION_DENIED,
        reason: "CAPABILITY_REUSED",
        toolId: EMAILS,
      });
      expect(rec).to.deep.include({ toolIdVerified: true, capabilityId: first.entry!.capabilityId, effectKind: EffectKind.EFFECT_KIND_UNSAFE });
      expect(await entriesOf(EMAILS)).to.equal(1);
    });

    it("a capability over 4 KiB: UNAUTHENTICATED CAPABILITY_TOO_LARGE, recorded (issue 15)", async function () {
      const big = `${"e".repeat(40)}.${"p".repeat(6000)}.${"s".repeat(86)}`;
      await expectRefusedAndRecorded(() => s.ledgerCalls.write(big, { key: "k", payload: payload("x") }), { code: unauth, reason: "CAPABILITY_TOO_LARGE" });
    });

    it("a capability too large for the HTTP/2 header limit is refused by the client, not reset into a bare INTERNAL (issue 15)", async function () {
      const client = new LedgerClient(s.ledger.endpoints.ledger!);
      const before = await s.admin.getStats();
      try {
        const e = await refusal(client.writeWithCapability("x".repeat(100 * 1024), { key: "k", payload: payload("x") }));
        expect([e.codeName, e.reason]).to.deep.equal(["INVALID_ARGUMENT", "CAPABILITY_TOO_LARGE"]);
        expect(e.message).to.match(/not sent/);
      } finally {
        client.close();
      }
      expect((await s.admin.getStats()).entries).to.equal(before.entries);
    });
  });

  describe("Queryable and Unsafe tools", function () {
    it("a Queryable tool writes under its request id without any key, and LookupRequest finds it without spending the capability", async function () {
      const begun = await s.kernelCalls.beginCall(SHIPMENTS, { request_id: `ship-${run}-1`, sku: "A" });
      const requestId = begun.call!.requestId;
      expect(requestId).to.equal(`ship-${run}-1`);
      expect((await s.ledgerCalls.lookup(begun.capability, requestId)).found, "not yet").to.equal(false);
      const res = await s.ledgerCalls.write(begun.capability, { requestId, payload: payload("ship A") });
      expect(res.entry).to.deep.include({ requestId, key: "", toolId: SHIPMENTS, effectKind: EffectKind.EFFECT_KIND_QUERYABLE });
      for (let i = 0; i < 2; i++) {
        const found = await s.ledgerCalls.lookup(begun.capability, requestId);
        expect(found.found).to.equal(true);
        expect(found.entry!.entryId).to.equal(res.entry!.entryId);
      }
      await expectRefusedAndRecorded(() => s.ledgerCalls.lookup(begun.capability, "someone-elses-request"), {
        code: status.PERMISSION_DENIED,
        reason: "REQUEST_ID_MISMATCH",
        toolId: SHIPMENTS,
      });
    });

    it("a Queryable capability is single-use, while a fresh capability for the same request id is answered as a duplicate", async function () {
      const args = { request_id: `ship-${run}-2`, sku: "B" };
      const first = await s.kernelCalls.beginCall(SHIPMENTS, args);
      const res = await s.ledgerCalls.write(first.capability, { requestId: args.request_id, payload: payload("ship B") });
      await expectRefusedAndRecorded(() => s.ledgerCalls.write(first.capability, { requestId: args.request_id, payload: payload("ship B") }), {
        code: status.PERMISSION_DENIED,
        reason: "CAPABILITY_REUSED",
        toolId: SHIPMENTS,
      });
      const second = await s.kernelCalls.beginCall(SHIPMENTS, args);
      const again = await s.ledgerCalls.write(second.capability, { requestId: args.request_id, payload: payload("ship B") });
      expect(again.duplicate).to.equal(true);
      expect(again.entry!.entryId).to.equal(res.entry!.entryId);
      await expectRefusedAndRecorded(() => s.ledgerCalls.write(second.capability, { requestId: "other", payload: payload("x") }), {
        code: status.PERMISSION_DENIED,
        reason: "REQUEST_ID_MISMATCH",
        toolId: SHIPMENTS,
      });
    });

    it("an Unsafe tool writes without any key and is not refused for lacking one", async function () {
      const begun = await s.kernelCalls.beginCall(EMAILS, { to: "b@example.com", body: "hello" });
      const res = await s.ledgerCalls.write(begun.capability, { payload: payload("send hello") });
      expect(res.duplicate).to.equal(false);
      expect(res.entry).to.deep.include({ toolId: EMAILS, key: "", requestId: "", effectKind: EffectKind.EFFECT_KIND_UNSAFE });
    });
  });

  describe("the payload limit", function () {
    it("refuses a payload over the limit (INVALID_ARGUMENT PAYLOAD_TOO_LARGE) and records it against the tool", async function () {
      const begun = await beginOrder("o-big");
      const rec = await expectRefusedAndRecorded(
        () => s.ledgerCalls.write(begun.capability, { key: begun.call!.key, payload: Buffer.alloc(1024 * 1024 + 1, 1) }),
        { code: status.INVALID_ARGUMENT, reason: "PAYLOAD_TOO_LARGE", toolId: ORDERS },
      );
      expect(rec).to.deep.include({ toolIdVerified: true, code: "INVALID_ARGUMENT", attemptedKey: begun.call!.key });
      // The limit is inclusive: exactly 1 MiB is accepted.
      const ok = await s.ledgerCalls.write(begun.capability, { key: begun.call!.key, payload: Buffer.alloc(1024 * 1024, 1) });
      expect(ok.duplicate).to.equal(false);
    });
  });

  describe("the admin API", function () {
    it("refuses a call without the admin credential, and a call presenting a capability instead", async function () {
      const none = new AdminCalls(s.ledger.endpoints.admin!, undefined);
      const withCapability = new AdminCalls(s.ledger.endpoints.admin!, `Bearer ${(await beginOrder("o-admin")).capability}`);
      const wrong = new AdminCalls(s.ledger.endpoints.admin!, `Bearer ${s.adminToken}x`);
      try {
        for (const call of [() => none.getStats(), () => none.listRejections({}), () => none.getEntry({ key: "k" }), () => none.listEntries()]) {
          expect(await refusalOf(call())).to.deep.include({ code: status.UNAUTHENTICATED, reason: "ADMIN_CREDENTIAL_MISSING" });
        }
        expect(await refusalOf(withCapability.listRejections({}))).to.deep.include({ code: status.UNAUTHENTICATED, reason: "ADMIN_CREDENTIAL_INVALID" });
        expect(await refusalOf(wrong.getStats())).to.deep.include({ code: status.UNAUTHENTICATED, reason: "ADMIN_CREDENTIAL_INVALID" });
      } finally {
        none.close();
        withCapability.close();
        wrong.close();
      }
    });

    it("generates the admin credential on first start into the data dir, mode 0600, logging the path and never the token", async function () {
      const file = path.join(s.env.KEYCAP_DATA_DIR!, "admin-token");
      expect((await stat(file)).mode & 0o777).to.equal(0o600);
      expect(s.adminToken).to.match(/^[A-Za-z0-9_-]{43}$/);
      expect(s.ledger.output()).to.include(file);
      expect(s.ledger.output()).to.not.include(s.adminToken);
    });

    it("lists refusals newest first with page tokens, filtered by tool, reason and time", async function () {
      const all = (await s.admin.listRejections({ toolId: ORDERS, pageSize: 1000 })).rejections;
      expect(all.length).to.be.at.least(3);
      const times = all.map((r) => r.rejectedAt!.getTime());
      expect(times).to.deep.equal([...times].sort((a, b) => b - a));
      const seen: string[] = [];
      let token = "";
      do {
        const page = await s.admin.listRejections({ toolId: ORDERS, pageSize: 2, pageToken: token });
        expect(page.rejections.length).to.be.at.most(2);
        seen.push(...page.rejections.map((r) => r.rejectionId));
        token = page.nextPageToken;
      } while (token !== "");
      expect(seen).to.deep.equal(all.map((r) => r.rejectionId));
      const mismatches = (await s.admin.listRejections({ toolId: ORDERS, reason: "KEY_MISMATCH" })).rejections;
      expect(mismatches.map((r) => r.reason)).to.deep.equal(["KEY_MISMATCH"]);
      const oldest = all[all.length - 1]!.rejectedAt!;
      const after = (await s.admin.listRejections({ toolId: ORDERS, since: new Date(oldest.getTime() + 1) })).rejections;
      expect(after.length).to.be.below(all.length);
      expect((await s.admin.listRejections({ toolId: ORDERS, until: oldest })).rejections).to.deep.equal([]);
    });

    it("reports totals: entries, duplicates, payload mismatches, refusals by reason and by tool", async function () {
      const stats = await s.admin.getStats();
      const entries = (await s.admin.listEntries({ pageSize: 1000 })).entries;
      expect(stats.entries).to.equal(entries.length);
      expect(stats.duplicates).to.equal(entries.reduce((n, e) => n + e.duplicateCount, 0));
      expect(stats.payloadMismatches).to.be.at.least(1);
      expect(stats.rejectionsByTool[ORDERS]).to.be.at.least(3);
      expect(stats.rejectionsByTool[""]).to.be.at.least(2); // no capability, garbage
      expect(Object.values(stats.rejectionsByReason).reduce((a, b) => a + b, 0)).to.equal(stats.rejections);
    });
  });

  describe("exactly-once across replicas", function () {
    let second: ServiceProcess | undefined;
    after(async function () {
      await second?.stop("SIGKILL").catch(() => undefined);
    });

    it("200 concurrent writes of one key over two ledger processes on one MongoDB make exactly one entry, and every response names it", async function () {
      this.timeout(60_000);
      second = await startService("ledger", { ...s.env, KEYCAP_KERNEL_ADDRESS: s.kernel.endpoints.kernel! });
      const other = new LedgerCalls(second.endpoints.ledger!);
      try {
        const begun = await beginOrder(`o-race-${run}`);
        const key = begun.call!.key;
        const started = Date.now();
        const results = await Promise.all(
          Array.from({ length: 200 }, (_, i) => (i % 2 === 0 ? s.ledgerCalls : other).write(begun.capability, { key, payload: payload("race") })),
        );
        const ms = Date.now() - started;
        const ids = new Set(results.map((r) => r.entry!.entryId));
        expect(ids.size, "one entry id in every response").to.equal(1);
        expect(
          results.filter((r) => !r.duplicate),
          "exactly one first write",
        ).to.have.length(1);
        const stored = (await s.admin.getEntry({ key })).entry!;
        expect(stored.entryId).to.equal([...ids][0]);
        // Every retry is counted exactly: duplicates are recorded by insert, not by
        // incrementing the entry (which lost concurrent $inc on FerretDB v1.24).
        expect(stored.duplicateCount).to.equal(199);
        expect((await s.admin.listEntries({ toolId: ORDERS, pageSize: 1000 })).entries.filter((e) => e.key === key)).to.have.length(1);
        this.test!.title += ` (${ms} ms)`;
      } finally {
        other.close();
      }
    });
  });

  describe("an unauthenticated refusal flood", function () {
    let flood: ServiceProcess | undefined;
    after(async function () {
      await flood?.stop("SIGKILL").catch(() => undefined);
    });

    it("is recorded individually up to the per-peer limit and summarised beyond it; verified refusals are still recorded one by one", async function () {
      this.timeout(45_000);
      // A ledger with a JWKS file and no reachable kernel: it starts and verifies anyway.
      const dir = await mkdtemp(path.join(tmpdir(), "keycap-jwks-"));
      const jwksFile = path.join(dir, "jwks.json");
      await writeFile(jwksFile, (await s.kernelCalls.getSigningKeys()).jwksJson);
      const env = serviceEnv({
        KEYCAP_MONGODB_DATABASE: freshDatabaseName(),
        KEYCAP_JWKS_FILE: jwksFile,
        KEYCAP_KERNEL_ADDRESS: "127.0.0.1:1",
        KEYCAP_UNAUTHENTICATED_AUDIT_PER_MINUTE: "5",
      });
      flood = await startService("ledger", env);
      const token = (await readFile(path.join(env.KEYCAP_DATA_DIR!, "admin-token"), "utf8")).trim();
      const ledger = new LedgerCalls(flood.endpoints.ledger!);
      const admin = new AdminCalls(flood.endpoints.admin!, `Bearer ${token}`);
      try {
        for (let i = 0; i < 40; i++) {
          expect((await refusalOf(ledger.write(`garbage-${i}`, { key: "k", payload: payload("x") }))).reason).to.equal("CAPABILITY_MALFORMED");
        }
        const begun = await beginOrder("o-flood");
        expect((await refusalOf(ledger.write(begun.capability, { key: "not-the-key", payload: payload("x") }))).reason).to.equal("KEY_MISMATCH");

        let summary: Rejection | undefined;
        for (let waited = 0; waited < 10_000 && summary?.count !== 35; waited += 200) {
          await new Promise((r) => setTimeout(r, 200));
          summary = (await admin.listRejections({ reason: "RATE_LIMITED_REFUSALS" })).rejections[0];
        }
        expect(summary, "one summary record").to.deep.include({ count: 35, toolIdVerified: false, peer: "127.0.0.1" });
        expect((await admin.listRejections({ reason: "RATE_LIMITED_REFUSALS" })).rejections).to.have.length(1);
        expect((await admin.listRejections({ reason: "CAPABILITY_MALFORMED" })).rejections).to.have.length(5);
        expect((await admin.listRejections({ reason: "KEY_MISMATCH", toolId: ORDERS })).rejections[0]).to.deep.include({ toolIdVerified: true });
        const stats = await admin.getStats();
        expect(stats.rejections, "the summary counts for every refusal it stands for").to.equal(41);
        expect(stats.entries).to.equal(0);
      } finally {
        ledger.close();
        admin.close();
      }
    });
  });
});
