/**
 * Reading a JWKS (RFC 7517) as the ledger accepts one: public Ed25519 keys only, each with
 * a kid, parsed once into KeyObjects.
 */
import { createPublicKey, type KeyObject } from "node:crypto";
import { CAPABILITY_ALG } from "../claims";

/** A JWKS was refused as a key source (file sources throw this at load). */
export class JwksError extends Error {
  constructor(message: string) {
    super(message.replace(/[\r\n]+/g, " "));
    this.name = "JwksError";
  }
}

/**
 * Parses a JWKS into public Ed25519 KeyObjects by kid. Refuses the whole set when any key
 * holds private material or is not OKP/Ed25519: such a set is a configuration mistake
 * (a private key published, or the wrong issuer), and quietly skipping keys would hide it.
 *
 * @throws JwksError with a one-line description of the first problem.
 * @example parseJwks(jwksJson).get(kid) // KeyObject | undefined
 */
export function parseJwks(json: string): Map<string, KeyObject> {
  let raw: unknown;
  try {
    raw = JSON.parse(json);
  } catch {
    // Not echoing the parser's message: it quotes the input, which may hold a private key.
    throw new JwksError("JWKS is not valid JSON");
  }
  if (!isRecord(raw) || !Array.isArray(raw["keys"])) throw new JwksError(`JWKS must be an object with a "keys" array`);
  const keys = new Map<string, KeyObject>();
  for (const [i, k] of (raw["keys"] as unknown[]).entries()) {
    const where = `JWKS key ${i}`;
    if (!isRecord(k)) throw new JwksError(`${where} is not an object`);
    for (const privateMember of ["d", "p", "q", "dp", "dq", "qi", "k", "priv"]) {
      if (privateMember in k) throw new JwksError(`${where} holds private key material ("${privateMember}"); publish public keys only`);
    }
    if (k["kty"] !== "OKP" || k["crv"] !== "Ed25519") throw new JwksError(`${where} is not an Ed25519 key (need kty "OKP", crv "Ed25519")`);
    const kid = k["kid"];
    if (typeof kid !== "string" || kid.length === 0) throw new JwksError(`${where} has no "kid"`);
    if (k["alg"] !== undefined && k["alg"] !== CAPABILITY_ALG) throw new JwksError(`${where} has alg other than "${CAPABILITY_ALG}"`);
    if (k["use"] !== undefined && k["use"] !== "sig") throw new JwksError(`${where} has use other than "sig"`);
    if (typeof k["x"] !== "string" || !/^[A-Za-z0-9_-]{43}$/.test(k["x"])) throw new JwksError(`${where} has no valid public key ("x")`);
    if (keys.has(kid)) throw new JwksError(`JWKS repeats kid ${kid}`);
    try {
      keys.set(kid, createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: k["x"] }, format: "jwk" }));
    } catch {
      throw new JwksError(`${where} is not a usable Ed25519 public key`);
    }
  }
  return keys;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
