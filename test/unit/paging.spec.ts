import { expect } from "chai";
import { decodePageToken, encodePageToken } from "../../services/common/src/paging";
import { KeycapError } from "../../services/common/src/errors";

const b64 = (v: unknown): string => Buffer.from(JSON.stringify(v)).toString("base64url");

describe("page tokens (issue 15)", function () {
  const spec = { t: "time", id: "id" } as const;

  it("round-trips the tokens the services issue", function () {
    const token = encodePageToken({ t: 1_733_000_000_000, id: "idem:k" });
    expect(decodePageToken(token, spec)).to.deep.equal({ t: 1_733_000_000_000, id: "idem:k" });
    expect(decodePageToken("", spec)).to.equal(undefined);
  });

  for (const [label, token] of [
    ["a time that is not a number", b64({ t: "x", id: "a" })],
    ["a time no Date can hold (1e300)", b64({ t: 1e300, id: "a" })],
    ["a time past year 275760", b64({ t: 9e15, id: "a" })],
    ["a fractional time", b64({ t: 1.5, id: "a" })],
    ["a negative time", b64({ t: -1, id: "a" })],
    ["an empty id", b64({ t: 1, id: "" })],
    ["a numeric id", b64({ t: 1, id: 7 })],
    ["a missing member", b64({ t: 1 })],
    ["an extra member", b64({ t: 1, id: "a", x: 1 })],
    ["an array", b64([1, "a"])],
    ["not JSON", Buffer.from("{").toString("base64url")],
    ["not base64url", "@@@"],
  ] as const) {
    it(`refuses ${label} as INVALID_PAGE_TOKEN`, function () {
      try {
        decodePageToken(token, spec);
        expect.fail("accepted");
      } catch (err) {
        expect(err).to.be.instanceOf(KeycapError);
        expect((err as KeycapError).reason).to.equal("INVALID_PAGE_TOKEN");
      }
    });
  }
});
