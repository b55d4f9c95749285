/**
 * Names of the scenarios the ratios and the report refer to (bench/README.md, "Scenarios").
 */

/** The plain insert every scenario is a ratio to. */
export const BASELINE = "ledger-write-baseline";
/** The baseline measured again after the enforced scenarios at the same level. */
export const BASELINE_AFTER = "ledger-write-baseline (after)";
/** The whole call: BeginCall → Write → CompleteCall through KernelClient. */
export const CALL = "call";
/** The whole call with one RPC per BeginCall and CompleteCall (a client with coalescing off, ADR 0022). */
export const CALL_UNARY = "call-unary";
/** The peer as a gRPC service: Powertools idempotency on Redis around the baseline's insert (bench/peer-server.ts). */
export const PEER = "peer-powertools";
/** The same peer inside the load-driving process, no RPC (openInProcessPeer in bench/peer-server.ts). */
export const PEER_INPROC = "peer-inproc";
/** The whole call on two kernels and two ledgers (round robin), same databases. */
export const CALL_2X2 = "call-2x2";
