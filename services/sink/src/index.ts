/**
 * keycap's sink SDK for TypeScript: make a service that performs an effect enforce the
 * capability itself (docs/decisions/0013-sink-sdks.md). The Python and Go SDKs follow the
 * same contract and the same test vectors. MCP servers use the middleware (McpSink), which
 * admits governed tools/calls on the same terms (docs/mcp-server-typescript.md).
 */
export {
  Sink,
  type SinkOptions,
  type AdmissionContext,
  type SinkRefusalEvent,
  type RefusalRecorder,
  type VerifiedCapability,
  InMemorySpentStore,
  MongoSpentStore,
  type SpentStore,
  type SpentCapability,
  type MongoSpentStoreOptions,
} from "../../capability/src";
export { capabilityOf } from "./capability-of";
export { protectService } from "./grpc-sink";
export { protectHttp, sinkMiddleware, writeProblem, httpStatusOf, type HttpSinkOptions } from "./http-sink";
export { KernelKeySource, openSinkRefusalStore } from "./sink-setup";
export type { Logger } from "../../common/src/logger";
export { FileJwksSource } from "../../capability/src";
export { McpSink, type McpSinkOptions, type GovernedTool, type ToolCallParams } from "./mcp-server";
export { keycapCallOf, type KeycapToolCall } from "./mcp-call";
export { GuardedTransport } from "./mcp-transport";
export { bindArguments, rederiveKey } from "./argument-binding";
export { META_CAPABILITY, META_IDEMPOTENCY_KEY, META_REQUEST_ID, META_CALL_ID, kernelToolId, type KeycapErrorData } from "../../common/src/mcp-contract";
