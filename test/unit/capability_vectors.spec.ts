import * as fs from "node:fs";
import { status } from "@grpc/grpc-js";
import { expect } from "chai";
import { CAPABILITY_REFUSAL_REASONS, CapabilityRefusal } from "../../services/capability/src";
import {
  CAPABILITY_VECTORS_FILE,
  authorizationOf,
  ledgerVerifierFor,
  loadCapabilityVectors,
  serializeCapabilityVectorFile,
  verdictFor,
  type CapabilityVector,
} from "../support/capability-vectors";
import { buildCapabilityVectorFile } from "../vectors/generate-capability-vectors";

const corpus = loadCapabilityVectors();

describe("capability verification vectors (test/vectors/capability-verification.json)", () => {
  it("are exactly what their generator produces, so the committed corpus can be reproduced", () => {
    expect(fs.readFileSync(CAPABILITY_VECTORS_FILE, "utf8")).to.equal(serializeCapabilityVectorFile(buildCapabilityVectorFile()));
  });

  it("cover every refusal reason the verifier can give, and acceptances, in at least 40 cases", () => {
    const reasons = new Set(corpus.vectors.flatMap((v) => ("refused" in v.expect ? [v.expect.refused] : [])));
    expect([...reasons].sort()).to.deep.equal([...CAPABILITY_REFUSAL_REASONS].sort());
    expect(corpus.vectors.filter((v) => "verified" in v.expect)).to.have.length.greaterThan(5);
    expect(corpus.vectors).to.have.length.of.at.least(40);
  });

  for (const [who, sandbox] of [
    ["the ledger's verifier (it verifies shadow and replay capabilities, ADR 0028)", "verify"],
    ["a verifier that does not know run modes (CapabilityVerifier's default, as the Python and Go SDKs)", "refuse"],
  ] as const) {
    describe(`${who} gives each vector's expected verdict exactly`, () => {
      for (const vector of corpus.vectors) checkVector(vector, sandbox);
    });
  }
});

function checkVector(vector: CapabilityVector, sandbox: "refuse" | "verify"): void {
  const verdict = sandbox === "verify" ? verdictFor(vector, "ledger") : vector.expect;
  const title = "verified" in verdict ? "accepts" : `refuses ${verdict.refused}`;
  it(`${vector.name}: ${title}`, async () => {
    const verifier = ledgerVerifierFor(corpus, vector, sandbox);
    let caught: unknown;
    let result: unknown;
    try {
      result = await verifier.verify(authorizationOf(vector));
    } catch (err) {
      caught = err;
    }
    if ("verified" in verdict) {
      expect(caught, `${vector.name}: refused ${caught instanceof CapabilityRefusal ? caught.reason : String(caught)}`).to.equal(undefined);
      expect(result).to.deep.equal(verdict.verified);
      return;
    }
    expect(caught, `${vector.name} must be refused`).to.be.instanceOf(CapabilityRefusal);
    const refusal = caught as CapabilityRefusal;
    expect(refusal.reason).to.equal(verdict.refused);
    expect(refusal.signatureVerified, "signature_verified").to.equal(verdict.signature_verified);
    expect(refusal.code).to.equal(verdict.refused === "SIGNING_KEYS_UNAVAILABLE" ? status.UNAVAILABLE : status.UNAUTHENTICATED);
    // A bearer credential never appears in what the refusal says.
    if (vector.token.length > 0) expect(refusal.message).to.not.include(vector.token);
    expect(refusal.message).to.not.include("\n");
  });
}
