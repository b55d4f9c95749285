/** Capability lifetimes and names, the operating contract the kernel mints to and every verifier checks (DESIGN §3). */

/** Capability lifetime the kernel mints with, in seconds (`exp - iat`). */
export const DEFAULT_LIFETIME_SECONDS = 300;

/** Longest `exp - iat` a verifier accepts, in seconds; the minter refuses to exceed it. */
export const MAX_LIFETIME_SECONDS = 900;

/** Clock skew a verifier tolerates on `exp` and `iat`, in seconds. */
export const CLOCK_TOLERANCE_SECONDS = 5;

/** `iss` the kernel writes unless configured otherwise (KEYCAP_ISSUER). */
export const DEFAULT_ISSUER = "keycap-kernel";

/** `aud` the kernel writes and the ledger expects unless configured otherwise (KEYCAP_AUDIENCE). */
export const DEFAULT_AUDIENCE = "keycap-ledger";
