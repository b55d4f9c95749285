/**
 * The `_meta` keys keycap reads and writes on MCP messages, namespaced as the MCP spec asks
 * (a reverse-DNS prefix ending in `/`).
 */

/** tools/call request from the host: the run the call belongs to (ADR 0023). */
export const META_RUN_ID = "io.keycap/run-id";
/** tools/call request to the upstream: the capability (compact JWS) of this call's attempt. */
export const META_CAPABILITY = "io.keycap/capability";
/** tools/call request to the upstream, and result to the host: the kernel-derived key. */
export const META_IDEMPOTENCY_KEY = "io.keycap/idempotency-key";
/** tools/call request to the upstream: a Queryable call's request id. */
export const META_REQUEST_ID = "io.keycap/request-id";
/** Both directions: the kernel call id. */
export const META_CALL_ID = "io.keycap/call-id";
/** Result to the host: true when the result is the stored one of an earlier call with the same key. */
export const META_REPLAY = "io.keycap/replay";
/** Result to the host: when the result was stored. */
export const META_RECORDED_AT = "io.keycap/recorded-at";
/** Result to the host: true on the gateway's own tool error, when nothing was sent upstream. */
export const META_NOT_SENT = "io.keycap/not-sent";
/** Result to the host: true on a replay whose call had other arguments than the stored one's (same key; dedupe is by key only). */
export const META_ARGUMENTS_MISMATCH = "io.keycap/arguments-mismatch";
