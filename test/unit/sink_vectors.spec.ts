/**
 * The TypeScript sink SDK against the shared capability vectors (issue 12): a sink that
 * serves every tool the corpus names admits exactly the vectors the ledger accepts, with
 * the same claims, and refuses the others with the same reason. The Python and Go SDKs run
 * the same file in their own suites.
 */
import { expect } from "chai";
import { RemoteJwksSource } from "../../services/capability/src";
import { CapabilityRefusal } from "../../services/capability/src";
import { InMemorySpentStore, Sink, type SinkRefusalEvent } from "../../services/sink/src";
import { authorizationOf, loadCapabilityVectors, verdictFor, type CapabilityVector } from "../support/capability-vectors";
import { KeycapError } from "../../services/common/src/errors";

const corpus = loadCapabilityVectors();

function toolIdsOf(vectors: readonly CapabilityVector[]): string[] {
  const ids = new Set<string>();
  for (const v of vectors) {
    const payload = v.token.split(".")[1];
    try {
      const claims = JSON.parse(Buffer.from(payload ?? "", "base64url").toString()) as { tool_id?: unknown };
      if (typeof claims.tool_id === "string") ids.add(claims.tool_id);
    } catch {
      // a deliberately broken token names no tool
    }
  }
  return [...ids];
}

function sinkFor(vector: CapabilityVector, events: SinkRefusalEvent[]): Sink {
  const jwks = vector.jwks;
  const keys = new RemoteJwksSource(async () => {
    if (jwks === null) throw new Error("GetSigningKeys at 127.0.0.1:1: connect ECONNREFUSED");
    return JSON.stringify(jwks);
  });
  return new Sink({
    name: "vectors",
    tools: toolIdsOf(corpus.vectors),
    keys,
    spentStore: new InMemorySpentStore(() => vector.clock * 1000),
    verifier: {
      issuer: corpus.verifier.issuer,
      audience: corpus.verifier.audience,
      maxTokenBytes: corpus.verifier.max_token_bytes,
      maxLifetimeSeconds: corpus.verifier.max_lifetime_seconds,
      clockToleranceSeconds: corpus.verifier.clock_tolerance_seconds,
    },
    now: () => vector.clock * 1000,
    onRefusal: (e) => events.push(e),
  });
}

describe("sink SDK (TypeScript) against test/vectors/capability-verification.json", () => {
  for (const vector of corpus.vectors) {
    const verdict = verdictFor(vector, "sink");
    it(`${vector.name}: ${"verified" in verdict ? "admits" : `refuses ${verdict.refused}`}`, async () => {
      const events: SinkRefusalEvent[] = [];
      const sink = sinkFor(vector, events);
      const admitted = sink.admit(authorizationOf(vector), { method: "vectors", peer: "127.0.0.1:1" });
      if ("verified" in verdict) {
        expect(await admitted).to.deep.equal(verdict.verified);
        expect(events).to.deep.equal([]);
        return;
      }
      const err = await admitted.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).to.be.instanceOf(KeycapError);
      const refusal = err as KeycapError;
      // A refusal after verification (a sandbox capability) is the sink's own, with the verified tool.
      const signatureVerified = refusal instanceof CapabilityRefusal ? refusal.signatureVerified : true;
      expect([refusal.reason, signatureVerified]).to.deep.equal([verdict.refused, verdict.signature_verified]);
      expect(events.map((e) => e.error.reason)).to.deep.equal([verdict.refused]);
    });
  }
});
