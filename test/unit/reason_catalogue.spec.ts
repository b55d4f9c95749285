/**
 * Issue 14: one reason catalogue (proto/keycap/rules/v1/reasons.proto), generated
 * into constants. Every refusal the services raise must name a catalogue reason
 * with the catalogue's code, and the catalogue must hold nothing the services
 * never raise. The services are read as source: a reason is the UPPER_SNAKE
 * literal given to KeycapError / invalidArgument / a refusal helper.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { status } from "@grpc/grpc-js";
import { expect } from "chai";
import { REASON_CODES, Reasons, type Reason } from "../../gen/ts/keycap/rules/v1/reasons.catalog";
import { Reasons as ClientReasons } from "../../clients/ts/src";

function sources(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((d) => {
    const p = path.join(dir, d.name);
    return d.isDirectory() ? sources(p) : p.endsWith(".ts") ? [p] : [];
  });
}

const files = sources(path.join(process.cwd(), "services"));
const text = files.map((f) => fs.readFileSync(f, "utf8")).join("\n");
const inCatalogue = (r: string): r is Reason => Object.prototype.hasOwnProperty.call(REASON_CODES, r);

describe("the reason catalogue (issue 14)", () => {
  it("gives every reason raised with an explicit code that same code", () => {
    const pairs = [...text.matchAll(/(?:status|Code)\.([A-Z_]+),\s*"([A-Z][A-Z0-9_]+)"/g)].map((m) => [m[1]!, m[2]!] as const);
    const invalid = [...text.matchAll(/invalidArgument\(\s*"([A-Z][A-Z0-9_]+)"/g)].map((m) => ["INVALID_ARGUMENT", m[1]!] as const);
    const all = [...pairs, ...invalid];
    expect(all.length).to.be.greaterThan(50);
    const wrong = all.filter(([code, reason]) => !inCatalogue(reason) || REASON_CODES[reason] !== status[code as keyof typeof status]);
    expect(wrong, "reason not in proto/keycap/rules/v1/reasons.proto, or with another code").to.deep.equal([]);
  });

  it("lists no reason the services never raise", () => {
    const unused = Object.keys(REASON_CODES).filter((r) => !text.includes(`"${r}"`));
    expect(unused).to.deep.equal([]);
  });

  it("is exposed to TypeScript clients as constants", () => {
    expect(ClientReasons.KEY_FIELD_MISSING).to.equal("KEY_FIELD_MISSING");
    expect(Object.keys(ClientReasons)).to.deep.equal(Object.keys(Reasons));
  });
});
