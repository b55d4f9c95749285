/**
 * Strict parsing of a JWS in compact serialization (RFC 7515 §7.1), done once per token:
 * three base64url parts, each the one canonical spelling of its bytes, header and payload
 * decoded and parsed as JSON. Nothing here is verified or trusted; the verifier checks the
 * result (header profile, signature over the exact parts, claims).
 */

/** A compact JWS split and decoded, not yet verified. */
export interface ParsedCompactJws {
  /** The three parts exactly as spelled in the token (canonical base64url). */
  readonly headerB64: string;
  readonly payloadB64: string;
  /** Empty for an unsigned token (`alg: none`). */
  readonly signatureB64: string;
  /** Decoded bytes, not yet checked to be UTF-8 (the verifier requires it before accepting). */
  readonly headerBytes: Buffer;
  readonly payloadBytes: Buffer;
  /** The bytes decoded leniently as UTF-8 and parsed; undefined unless a JSON object. */
  readonly header: Record<string, unknown> | undefined;
  readonly payload: Record<string, unknown> | undefined;
}

/** Why a string is not a compact JWS this parser accepts. */
export type CompactJwsProblem =
  /** Not three dot-separated base64url parts (header and payload non-empty). */
  | "not-compact"
  /** Padding, a length of 1 mod 4, or non-zero bits past the last whole byte. */
  | "not-canonical-base64url";

// Compact JWS: three base64url parts. The signature part may be empty so that `alg: none`
// tokens are refused for their algorithm, the clearer reason.
const COMPACT_JWS = /^([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]*)$/;

const BASE64URL_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/**
 * Splits and decodes a compact JWS.
 *
 * @returns the parts, or the problem that makes `token` unacceptable.
 * @example parseCompactJws("eyJhbGciOi...") // { headerB64, ..., header: { alg: "EdDSA", ... } }
 */
export function parseCompactJws(token: string): ParsedCompactJws | { problem: CompactJwsProblem } {
  const parts = COMPACT_JWS.exec(token);
  if (!parts) return { problem: "not-compact" };
  const [, headerB64 = "", payloadB64 = "", signatureB64 = ""] = parts;
  // One token, one spelling: Node's decoder would quietly drop stray trailing bits, so a
  // token could be re-spelled without touching its signature.
  if (!isCanonicalBase64url(headerB64) || !isCanonicalBase64url(payloadB64) || !isCanonicalBase64url(signatureB64)) {
    return { problem: "not-canonical-base64url" };
  }
  // Decoded leniently so that a refusal record (best effort) names what it can; the
  // verifier requires strict UTF-8 of both before it accepts anything.
  const headerBytes = Buffer.from(headerB64, "base64url");
  const payloadBytes = Buffer.from(payloadB64, "base64url");
  return {
    headerB64,
    payloadB64,
    signatureB64,
    headerBytes,
    payloadBytes,
    header: parseJsonObject(headerBytes.toString("utf8")),
    payload: parseJsonObject(payloadBytes.toString("utf8")),
  };
}

/**
 * True when `s` (already known to be base64url characters) is the one encoding of its
 * bytes: unpadded, a length that is not 1 mod 4, and zero bits past the last whole byte.
 */
export function isCanonicalBase64url(s: string): boolean {
  const rest = s.length % 4;
  if (rest === 0) return true;
  if (rest === 1) return false;
  // 2 chars carry 1 byte (4 spare bits), 3 chars carry 2 bytes (2 spare bits).
  const last = BASE64URL_ALPHABET.indexOf(s.charAt(s.length - 1));
  return (last & (rest === 2 ? 0x0f : 0x03)) === 0;
}

/** JSON text → object, or undefined. No trust implied: used before verification. */
function parseJsonObject(text: string): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(text);
    return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}
