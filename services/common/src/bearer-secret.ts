/**
 * A shared bearer secret (the admin token, the MCP gateway's host token): checked against
 * `authorization` values by SHA-256 digest in constant time, so the comparison leaks neither
 * the secret nor its length. Only the digest is kept here; the log redactor keeps the value
 * so it can take it out of any line (DESIGN §13).
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { parseBearer } from "./bearer";
import { registerSecret } from "./secret-redaction";

/** Outcome of checking presented `authorization` values. */
export type BearerCheck = "ok" | "missing" | "invalid";

export class BearerSecret {
  private readonly digest: Buffer;

  constructor(secret: string) {
    this.digest = sha256(secret);
    registerSecret(secret);
  }

  /** Whether a presented bearer token is the secret. */
  matches(token: string): boolean {
    return timingSafeEqual(sha256(token), this.digest);
  }

  /**
   * Checks the `authorization` values of one request: none (or only blank ones) is
   * missing; more than one, a value that is not `Bearer <token68>`, or another token is invalid.
   */
  check(authorization: readonly string[]): BearerCheck {
    if (authorization.length === 0 || authorization.every((v) => v.trim() === "")) return "missing";
    if (authorization.length > 1) return "invalid";
    const presented = parseBearer(authorization[0]);
    return presented !== undefined && this.matches(presented) ? "ok" : "invalid";
  }
}

function sha256(s: string): Buffer {
  return createHash("sha256").update(s, "utf8").digest();
}
