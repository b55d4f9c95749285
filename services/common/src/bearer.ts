/** The credential of an HTTP/gRPC `authorization: Bearer <token>` value (RFC 6750 token68). */
const BEARER = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i;

/**
 * Extracts the credential from an `authorization: Bearer <token>` metadata value.
 *
 * @returns the token, or undefined when the value is absent or not a Bearer credential.
 * @example parseBearer("Bearer eyJhbGciOi...") // "eyJhbGciOi..."
 */
export function parseBearer(metadataValue: string | undefined): string | undefined {
  if (metadataValue === undefined) return undefined;
  const match = BEARER.exec(metadataValue);
  return match?.[1];
}
