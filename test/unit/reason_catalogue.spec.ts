/**
 * Issue 14: one reason catalogue (proto/keycap/rules/v1/reasons.proto), generated
 * into constants. Every refusal the services raise must name a catalogue reason
 * with the catalogue's code, and the catalogue must hold nothing the services
 * never raise. Since issue 31 every throw site names its reason as `Reasons.X` and
 * `refuse` takes the code from the catalogue, so the compiler holds the pairing; the
 * sources are read only to check no site bypasses it.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { status } from "@grpc/grpc-js";
import { expect } from "chai";
import { REASON_CODES, Reasons } from "../../gen/ts/keycap/rules/v1/reasons.catalog";
import { refuse } from "../../services/common/src/refuse";
import { Reasons as ClientReasons } from "../../clients/ts/src";

function sources(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((d) => {
    const p = path.join(dir, d.name);
    return d.isDirectory() ? sources(p) : p.endsWith(".ts") ? [p] : [];
  });
}

const files = sources(path.join(process.cwd(), "services"));
const text = files.map((f) => fs.readFileSync(f, "utf8")).join("\n");
/** The reasons the request rules in proto/ raise (`reason: "X"` beside each rule, ADR 0010). */
const ruleReasons = fs
  .readdirSync(path.join(process.cwd(), "proto", "keycap"), { recursive: true, encoding: "utf8" })
  .filter((f) => f.endsWith(".proto"))
  .flatMap((f) => [...fs.readFileSync(path.join(process.cwd(), "proto", "keycap", f), "utf8").matchAll(/reason: "([A-Z0-9_]+)"/g)].map((m) => m[1]));

describe("the reason catalogue (issue 14)", () => {
  it("is where every throw site gets its reason and code: no reason as a string literal, no code picked by hand (issue 31)", () => {
    const handPicked = files.flatMap((f) => {
      const src = fs.readFileSync(f, "utf8");
      return [
        ...src.matchAll(
          /new KeycapError\(\s*[^,()]+,\s*"[A-Z]|invalidArgument\(\s*"[A-Z]|new CapabilityRefusal\(\s*[^,()]*"[A-Z]|refuseCapability\(\s*"[A-Z]/g,
        ),
      ]
        .filter((m) => !/^\s*\*/.test(src.slice(src.lastIndexOf("\n", m.index) + 1, m.index))) // JSDoc examples
        .map((m) => `${path.relative(process.cwd(), f)}: ${m[0]}`);
    });
    expect(handPicked, "throw refuse(Reasons.X, ...) instead").to.deep.equal([]);
    // The catalogue is used: refuse(Reasons.X) at the sites, and its code is the catalogue's.
    expect([...text.matchAll(/refuse\(Reasons\.([A-Z0-9_]+)/g)].length).to.be.greaterThan(50);
    expect(refuse(Reasons.KEY_MISMATCH, "m").code).to.equal(status.PERMISSION_DENIED);
    expect(refuse(Reasons.OPERATOR_QUERY_TIMEOUT, "m").code).to.equal(status.DEADLINE_EXCEEDED);
  });

  it("lists no reason the services never raise", () => {
    const unused = Object.keys(REASON_CODES).filter((r) => !text.includes(`"${r}"`) && !text.includes(`Reasons.${r}`) && !ruleReasons.includes(r));
    expect(unused).to.deep.equal([]);
  });

  it("is exposed to TypeScript clients as constants", () => {
    expect(ClientReasons.KEY_FIELD_MISSING).to.equal("KEY_FIELD_MISSING");
    expect(Object.keys(ClientReasons)).to.deep.equal(Object.keys(Reasons));
  });
});
