/**
 * OpenTelemetry tracing of a keycap process (ADR 0017): off unless OTEL_TRACES_EXPORTER
 * names an exporter (the SDK's own default would be "otlp"; keycap sends nothing anywhere
 * unless asked). Configured only by the standard OTEL_* variables (endpoint, protocol,
 * headers, sampler, service name, batch delays). The SDK and its gRPC and MongoDB
 * instrumentation are loaded only when enabled, and must be started before grpc-js and the
 * mongodb driver are first required: the CLI imports this module first.
 */

type Env = Readonly<Record<string, string | undefined>>;

/** Whether the environment asks for traces. */
export function tracingRequested(env: Env = process.env): boolean {
  const exporter = (env["OTEL_TRACES_EXPORTER"] ?? "").trim();
  return exporter !== "" && exporter !== "none" && (env["OTEL_SDK_DISABLED"] ?? "").trim().toLowerCase() !== "true";
}

export interface RunningTracing {
  /** Flushes spans not yet exported and stops the SDK. */
  shutdown(): Promise<void>;
}

let running: RunningTracing | undefined;

/**
 * Starts the SDK when the environment asks for it (once per process); `defaultServiceName`
 * is used unless OTEL_SERVICE_NAME is set.
 */
export function startTracing(defaultServiceName: string, env: Env = process.env): RunningTracing | undefined {
  if (running || !tracingRequested(env)) return running;
  if ((env["OTEL_SERVICE_NAME"] ?? "") === "") process.env["OTEL_SERVICE_NAME"] = defaultServiceName;
  // Loaded here, not at the top: with traces off none of this is ever read from disk.
  /* eslint-disable @typescript-eslint/no-require-imports */
  const { NodeSDK } = require("@opentelemetry/sdk-node") as typeof import("@opentelemetry/sdk-node");
  const { GrpcInstrumentation } = require("@opentelemetry/instrumentation-grpc") as typeof import("@opentelemetry/instrumentation-grpc");
  const { MongoDBInstrumentation } = require("@opentelemetry/instrumentation-mongodb") as typeof import("@opentelemetry/instrumentation-mongodb");
  /* eslint-enable @typescript-eslint/no-require-imports */
  const sdk = new NodeSDK({
    instrumentations: [
      // Health checks and reflection are not the calls anyone traces.
      new GrpcInstrumentation({ ignoreGrpcMethods: [/^Check$/, /^Watch$/, /ServerReflectionInfo/] }),
      // Database operations only inside a traced call, never the driver's own heartbeats.
      new MongoDBInstrumentation({ requireParentSpan: true }),
    ],
  });
  sdk.start();
  running = { shutdown: () => sdk.shutdown() };
  return running;
}

/** Stops tracing if it was started (flushing what is pending); a no-op otherwise. */
export async function stopTracing(): Promise<void> {
  await running?.shutdown().catch(() => undefined);
}
