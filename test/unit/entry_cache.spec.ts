/**
 * The ledger's known-entries cache keeps payloads of its own: a payload decoded from a
 * gRPC request is a view into the socket chunk it came in (shared with other requests),
 * and caching the view kept every chunk alive (the ledger's RSS grew ~5 KiB per call over
 * a 5-minute whole-call soak, 162 → 324 MiB).
 */
import { expect } from "chai";
import { cachedCopy, type EntryDoc } from "../../services/ledger/src/entry-store";

describe("ledger known-entries cache", () => {
  it("copies the payload out of the request's buffer instead of keeping a view into it", () => {
    const chunk = Buffer.alloc(64 * 1024, 0x61); // one socket read holding many requests
    const payload = chunk.subarray(1000, 1256);
    const doc: EntryDoc = {
      _id: "idem:K",
      entry_id: "e_1",
      tool_id: "pay",
      effect: "idempotent",
      call_id: "c",
      attempt: 1,
      capability_id: "j",
      key: "K",
      request_id: "",
      payload,
      payload_sha256: "",
      recorded_at: new Date(0),
      payload_mismatch: false,
    };
    const cached = cachedCopy(doc);
    const kept = cached.payload as Buffer;
    expect(kept.equals(payload)).to.equal(true);
    expect(kept.buffer.byteLength, "the cached payload must not pin the 64 KiB chunk").to.be.below(16 * 1024);
    chunk.fill(0x62);
    expect(kept[0], "and later writes to the chunk do not reach it").to.equal(0x61);
    expect({ ...cached, payload: undefined }).to.deep.equal({ ...doc, payload: undefined });
  });
});
