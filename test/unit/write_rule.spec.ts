import { expect } from "chai";
import { decideLookup, decideWrite, type GrantClaims, type WriteDecision } from "../../services/ledger/src/domain/write-rule";
import { ipOfPeer, PeerRateLimiter } from "../../services/common/src/rejection-audit";

const LIMIT = 1024;
const idem: GrantClaims = { tool_id: "pay", effect: "idempotent", jti: "j1", key: "K" };
const query: GrantClaims = { tool_id: "ship", effect: "queryable", jti: "j2", request_id: "R" };
const unsafe: GrantClaims = { tool_id: "mail", effect: "unsafe", jti: "j3" };

function ask(key = "", requestId = "", payloadBytes = 10): { key: string; requestId: string; payloadBytes: number } {
  return { key, requestId, payloadBytes };
}

function refusal(d: WriteDecision): string | undefined {
  return d.ok ? undefined : `${d.refusal.kind}:${d.refusal.reason}`;
}

describe("write rule (DESIGN §4, pure)", () => {
  describe("idempotent capability", () => {
    it("accepts the capability's own key and claims the effect under that key alone", () => {
      const d = decideWrite(idem, ask("K"), LIMIT);
      expect(d).to.deep.equal({
        ok: true,
        grant: { effect: "idempotent", effectId: "idem:K", key: "K", requestId: "", spendCapability: false, duplicateIsReuse: false },
      });
    });
    it("refuses another key as KEY_MISMATCH (outside the grant)", () => {
      expect(refusal(decideWrite(idem, ask("other"), LIMIT))).to.equal("outside_grant:KEY_MISMATCH");
    });
    it("refuses a write without a key as KEY_MISSING", () => {
      expect(refusal(decideWrite(idem, ask(""), LIMIT))).to.equal("outside_grant:KEY_MISSING");
    });
    it("refuses a request id as EFFECT_CLASS_MISMATCH", () => {
      expect(refusal(decideWrite(idem, ask("K", "R"), LIMIT))).to.equal("outside_grant:EFFECT_CLASS_MISMATCH");
    });
    it("refuses an oversized payload as malformed PAYLOAD_TOO_LARGE, but only after the grant holds", () => {
      expect(refusal(decideWrite(idem, ask("K", "", LIMIT + 1), LIMIT))).to.equal("malformed:PAYLOAD_TOO_LARGE");
      expect(refusal(decideWrite(idem, ask("K", "", LIMIT), LIMIT))).to.equal(undefined);
      expect(refusal(decideWrite(idem, ask("x", "", LIMIT + 1), LIMIT))).to.equal("outside_grant:KEY_MISMATCH");
    });
  });

  describe("queryable capability", () => {
    it("accepts its request id, spends the capability, and scopes the effect by tool", () => {
      const d = decideWrite(query, ask("", "R"), LIMIT);
      expect(d.ok && d.grant).to.deep.equal({
        effect: "queryable",
        effectId: `req:${JSON.stringify(["ship", "R"])}`,
        key: "",
        requestId: "R",
        spendCapability: true,
        duplicateIsReuse: false,
      });
    });
    it("refuses a missing or different request id, and a key", () => {
      expect(refusal(decideWrite(query, ask("", ""), LIMIT))).to.equal("outside_grant:REQUEST_ID_MISSING");
      expect(refusal(decideWrite(query, ask("", "S"), LIMIT))).to.equal("outside_grant:REQUEST_ID_MISMATCH");
      expect(refusal(decideWrite(query, ask("K", "R"), LIMIT))).to.equal("outside_grant:EFFECT_CLASS_MISMATCH");
    });
  });

  describe("unsafe capability", () => {
    it("accepts an unkeyed write under an effect id naming the capability, so a second use collides", () => {
      const d = decideWrite(unsafe, ask(), LIMIT);
      expect(d.ok && d.grant).to.deep.include({ effectId: "cap:j3", duplicateIsReuse: true, spendCapability: false });
    });
    it("refuses a key or request id as EFFECT_CLASS_MISMATCH", () => {
      expect(refusal(decideWrite(unsafe, ask("K"), LIMIT))).to.equal("outside_grant:EFFECT_CLASS_MISMATCH");
      expect(refusal(decideWrite(unsafe, ask("", "R"), LIMIT))).to.equal("outside_grant:EFFECT_CLASS_MISMATCH");
    });
  });

  describe("lookup", () => {
    it("answers only a queryable capability for that very request id", () => {
      expect(decideLookup(query, "R")).to.deep.equal({ ok: true, effectId: `req:${JSON.stringify(["ship", "R"])}` });
      const reasons = [decideLookup(query, "S"), decideLookup(query, ""), decideLookup(idem, "R")].map((d) => (d.ok ? "ok" : d.refusal.reason));
      expect(reasons).to.deep.equal(["REQUEST_ID_MISMATCH", "REQUEST_ID_MISSING", "EFFECT_CLASS_MISMATCH"]);
    });
  });

  describe("unauthenticated audit limiter", () => {
    it("allows perMinute records per peer, then refills over the minute", () => {
      let t = 0;
      const l = new PeerRateLimiter(3, () => t);
      expect([1, 2, 3, 4].map(() => l.take("a"))).to.deep.equal([true, true, true, false]);
      expect(l.take("b")).to.equal(true);
      t += 20_000; // one token back
      expect([l.take("a"), l.take("a")]).to.deep.equal([true, false]);
    });
    it("keys peers by IP, not by port", () => {
      expect(ipOfPeer("127.0.0.1:5000")).to.equal("127.0.0.1");
      expect(ipOfPeer("ipv4:10.0.0.1:1")).to.equal("10.0.0.1");
      expect(ipOfPeer("::1:5000")).to.equal("::1");
      expect(ipOfPeer("[::1]:5000")).to.equal("::1");
    });
  });
});
