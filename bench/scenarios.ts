/**
 * Names of the scenarios the ratios and the report refer to (bench/README.md, "Scenarios").
 */

/** The plain insert every scenario is a ratio to. */
export const BASELINE = "ledger-write-baseline";
/** The baseline measured again after the enforced scenarios at the same level. */
export const BASELINE_AFTER = "ledger-write-baseline (after)";
/** The whole call through KernelClient: BeginCall → Write; the ledger's entry completes it (ADR 0034), no CompleteCall. */
export const CALL = "call";
/**
 * The whole call as an older client makes it: BeginCall → Write → CompleteCall (an explicit
 * `completeCall`, coalesced like the client's completes were before ADR 0034): three hops and the
 * kernel's completion insert on the path. The "before" beside `call`'s "after".
 */
export const CALL_3HOP = "call-3hop";
/** The whole call with one RPC per BeginCall and CompleteCall (a client with coalescing off, ADR 0022). */
export const CALL_UNARY = "call-unary";
/** The peer as a gRPC service: Powertools idempotency on Redis around the baseline's insert (bench/peer-server.ts). */
export const PEER = "peer-powertools";
/** The same peer inside the load-driving process, no RPC (openInProcessPeer in bench/peer-server.ts). */
export const PEER_INPROC = "peer-inproc";
/** The whole call on two kernels and two ledgers (round robin), same databases. */
export const CALL_2X2 = "call-2x2";
