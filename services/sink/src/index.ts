/**
 * keycap's sink SDK for TypeScript: make a service that performs an effect enforce the
 * capability itself (docs/decisions/0013-sink-sdks.md). The Python and Go SDKs follow the
 * same contract and the same test vectors.
 */
export { Sink, type SinkOptions, type AdmissionContext, type SinkRefusalEvent, type RefusalRecorder, type VerifiedCapability } from "./sink";
export { capabilityOf } from "./capability-of";
export { protectService } from "./grpc-sink";
export { protectHttp, sinkMiddleware, writeProblem, httpStatusOf, type HttpSinkOptions } from "./http-sink";
export { InMemorySpentStore, MongoSpentStore, type SpentStore, type SpentCapability, type MongoSpentStoreOptions } from "./spent-store";
export { KernelKeySource, openSinkRefusalStore } from "./sink-setup";
export { FileJwksSource } from "../../capability/src";
