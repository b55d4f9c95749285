/**
 * keycap's TypeScript client: declare tools (an Idempotent tool without a key
 * derivation does not compile), begin calls, write through capability
 * handles, inspect the ledger, and recover after a crash.
 */
export {
  defineTool,
  toolToProto,
  type EffectSpec,
  type KeyDerivationSpec,
  type ToolDefinition,
  type HttpDestinationSpec,
  type HttpWriteMethod,
} from "./tool-definition";
export { KernelClient, type BeginOptions, type KernelClientOptions, type RunModeOption } from "./kernel-client";
export { CapabilityHandle } from "./capability-handle";
export { LedgerClient } from "./ledger-client";
export { GatewayClient, type ForwardSpec } from "./gateway-client";
export { AdminClient, type RejectionFilter } from "./admin-client";
export { AccessClient, type AccessClientOptions, type RoleName } from "./access-client";
export { KeycapClientError } from "./errors";
export type { FieldViolation } from "./status-details";
export { REASON_CODES, Reasons, type Reason } from "../gen/keycap/rules/v1/reasons.catalog";
export {
  channelCredentials,
  ClientConfigError,
  defaultDataDir,
  lookupRuntimeToken,
  missingCredentialHint,
  runtimeTokenFromEnv,
  tlsCredentials,
  tlsFromEnv,
  type RuntimeTokenLookup,
  type TlsOptions,
} from "./credentials";
export type { CallSettings } from "./rpc";
export { Runtime, type RuntimeTool, type ToolHandler, type RecoveryStep, type RecoverOptions, type RunModeOptions } from "./runtime";
// The batching schedule the client's call coalescer uses; keycap's services batch their
// inserts with it too (group commit, ADR 0020), through this entry like any other user.
export { TurnBatches } from "./turn-batches";
