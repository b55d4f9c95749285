/**
 * keycap's capability, as one module (DESIGN §3, ADR 0003): the claims and their profile,
 * the strict verifier (compact JWS, pinned Ed25519), where verifiers get the kernel's public
 * keys, the refusal a failed verification is, and a sink's admission of a request under a
 * capability (Sink: verification, tool allow-list, key match, single use). The ledger, the
 * sinks and the gateways verify through this entry point; the kernel mints with the claims
 * defined here. Nothing outside this folder imports its files directly (.dependency-cruiser.cjs).
 */
export {
  CAPABILITY_ALG,
  CAPABILITY_SANDBOX_TYP,
  CAPABILITY_TYP,
  CLOCK_TOLERANCE_SECONDS,
  DEFAULT_AUDIENCE,
  DEFAULT_ISSUER,
  DEFAULT_LIFETIME_SECONDS,
  EFFECT_NAMES,
  MAX_LIFETIME_SECONDS,
  REQUIRED_CLAIMS,
  SANDBOX_MODES,
  capabilityTypOf,
  findClaimProblem,
  type CapabilityClaims,
  type ClaimProblem,
  type DerivationClaim,
  type EffectName,
  type SandboxMode,
} from "./claims";
export { parseBearer } from "../../common/src/bearer";
export { CapabilityVerifier, type CapabilityVerifierOptions, type VerifiedCapability } from "./verifier";
export {
  CAPABILITY_REFUSAL_REASONS,
  CapabilityRefusal,
  keysUnavailable,
  readUnverifiedInfo,
  refuseCapability,
  type CapabilityRefusalReason,
  type UnauthenticatedReason,
  type UnverifiedCapabilityInfo,
} from "./refusal";
export { isCanonicalBase64url, parseCompactJws, type CompactJwsProblem, type ParsedCompactJws } from "./compact-jws";
export { verifyEd25519 } from "./ed25519";
export { FileJwksSource, JwksError, KernelJwksFetcher, parseJwks, RemoteJwksSource, type PublicKeySource, type RemoteJwksSourceOptions } from "./key-sources";
export { openKernelKeys, type KernelKeys } from "./key-sources/kernel-keys";
export { Sink, type SinkOptions, type AdmissionContext, type SinkRefusalEvent, type RefusalRecorder } from "./admission";
export { InMemorySpentStore, MongoSpentStore, type SpentStore, type SpentCapability, type MongoSpentStoreOptions } from "./spent-store";
export { unverifiedRefusalRecord, verifiedRefusalRecord, type RefusalSite } from "./refusal-record";
