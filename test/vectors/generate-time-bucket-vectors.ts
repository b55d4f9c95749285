import { writeFileSync } from "node:fs";
import { marksFor, scopesOf, secondBucket } from "../../services/common/src/domain/time-buckets";
const cases = [
  { coll: "rejections", at: "2026-12-06T11:59:13.250Z", filters: { tool: "payments.charge", reason: "KEY_MISMATCH", service: "sink:payments" } },
  { coll: "rejections", at: "2026-01-01T00:00:00.000Z", filters: { tool: "", reason: "RATE_LIMITED_REFUSALS", service: "ledger" } },
  { coll: "entries", at: "2026-12-31T23:59:59.999Z", filters: { tool: "a/b|c é 💳" } },
  { coll: "calls", at: "1999-02-28T09:05:07.001Z", filters: { principal: "runtime:billing" } },
];
const out = cases.map((c) => {
  const at = new Date(c.at);
  return { ...c, lb: secondBucket(at), marks: marksFor(c.coll, at, scopesOf(c.filters)).map((m) => ({ ...m, at: m.at.toISOString() })) };
});
writeFileSync(
  "test/vectors/time-buckets.json",
  JSON.stringify(
    { description: "ADR 0033: lb and listing_marks of a record (scopesOf: all, then each non-empty filter in the order given)", cases: out },
    null,
    2,
  ) + "\n",
);
