/**
 * The ledger's completion receipts (ADR 0035): the kernel settles a call from one only when
 * the ledger issued it, under the shared key, for that call's entry at that time.
 */
import { expect } from "chai";
import { randomBytes } from "node:crypto";
import { issueReceipt, receiptHolds } from "../../services/common/src/domain/completion-receipt";

describe("completion receipts (ADR 0035)", () => {
  const secret = randomBytes(32);
  const claim = { callId: "call-1", recordedAtMs: Date.UTC(2026, 11, 7, 1, 0, 0, 123) };
  const receipt = issueReceipt(secret, "k-1", claim);

  it("holds for the call's entry under the key it was issued with", () => {
    expect(receiptHolds(secret, "k-1", receipt)).to.equal(true);
    expect(receiptHolds(Uint8Array.from(secret), "k-1", { ...receipt, mac: Uint8Array.from(receipt.mac) })).to.equal(true);
  });

  it("does not hold for another call, another key, another time, another secret, or an altered MAC", () => {
    expect(receiptHolds(secret, "k-1", { ...receipt, callId: "call-2" })).to.equal(false);
    expect(receiptHolds(secret, "k-2", receipt)).to.equal(false);
    expect(receiptHolds(secret, "k-1", { ...receipt, recordedAtMs: claim.recordedAtMs + 1 })).to.equal(false);
    expect(receiptHolds(randomBytes(32), "k-1", receipt)).to.equal(false);
    const flipped = Buffer.from(receipt.mac);
    flipped[0]! ^= 1;
    expect(receiptHolds(secret, "k-1", { ...receipt, mac: flipped })).to.equal(false);
  });

  it("refuses a MAC of the wrong length or a time that is not a whole number of ms, without throwing", () => {
    expect(receiptHolds(secret, "k-1", { ...receipt, mac: new Uint8Array(0) })).to.equal(false);
    expect(receiptHolds(secret, "k-1", { ...receipt, mac: Buffer.concat([Buffer.from(receipt.mac), Buffer.alloc(1)]) })).to.equal(false);
    expect(receiptHolds(secret, "k-1", { ...receipt, recordedAtMs: 1.5 })).to.equal(false);
  });

  it("keeps fields apart: moving characters between the call id and the key gives another MAC", () => {
    const a = issueReceipt(secret, "ab", { callId: "c", recordedAtMs: 1 });
    const b = issueReceipt(secret, "a", { callId: "bc", recordedAtMs: 1 });
    expect(Buffer.from(a.mac).equals(Buffer.from(b.mac))).to.equal(false);
  });
});
