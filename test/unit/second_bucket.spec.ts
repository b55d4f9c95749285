/**
 * The second bucket of a time (ADR 0033) remembers the last second asked for: it must still
 * answer every time by its own second, whatever was asked before.
 */
import { expect } from "chai";
import { secondBucket } from "../../services/common/src/domain/time-buckets";

describe("secondBucket", () => {
  it("answers each time by its own UTC second, alternating, within one second and across a day", () => {
    const times = [
      "2026-12-07T05:10:00.000Z",
      "2026-12-07T05:10:00.999Z",
      "2026-12-07T05:10:01.000Z",
      "2026-12-07T05:10:00.500Z",
      "1999-12-31T23:59:59.999Z",
      "2000-01-01T00:00:00.000Z",
    ];
    const want = ["20261207051000", "20261207051000", "20261207051001", "20261207051000", "19991231235959", "20000101000000"];
    for (let round = 0; round < 2; round++) expect(times.map((t) => secondBucket(new Date(t)))).to.deep.equal(want);
  });

  it("handles times before 1970 by their floor second", () => {
    expect(secondBucket(new Date("1969-12-31T23:59:59.500Z"))).to.equal("19691231235959");
    expect(secondBucket(new Date("1970-01-01T00:00:00.000Z"))).to.equal("19700101000000");
    expect(secondBucket(new Date("1969-12-31T23:59:59.500Z"))).to.equal("19691231235959");
  });
});
