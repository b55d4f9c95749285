import { withUtf8Check } from "./utf8-check";
import { RequestRules, withRequestRules } from "./request-rules";
import * as fs from "node:fs";
import { Server, setLogger, status, type handleUnaryCall, type ServiceDefinition, type UntypedServiceImplementation } from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { ReflectionService } from "@grpc/reflection";
import { HealthImplementation } from "grpc-health-check";
import { FileDescriptorProto, FileDescriptorSet } from "protobufjs/ext/descriptor";
import { ConfigError, formatHostPort, type HostPort } from "./config";
import type { Logger } from "./logger";
import type { Metrics } from "./metrics";
import { descriptorSetPath } from "./repo-paths";
import { ReloadableServerCredentials, serverCredentials } from "./tls";
import type { ListenerTls } from "./tls-config";

/** One gRPC service to serve on a listener. */
export interface ServiceBinding {
  /** Fully-qualified name, e.g. "keycap.kernel.v1.KernelService" (health and reflection use it). */
  name: string;
  definition: ServiceDefinition;
  implementation: UntypedServiceImplementation;
}

export interface ListenerOptions {
  /** Short name for logs: "kernel", "ledger", "admin". */
  name: string;
  address: HostPort;
  /** The setting the address came from (e.g. KEYCAP_KERNEL_LISTEN), named when it cannot be bound. */
  setting: string;
  services: ServiceBinding[];
  logger: Logger;
  /** Largest request accepted by the transport (bytes). */
  maxReceiveBytes?: number;
  /** TLS of this listener; undefined serves plaintext (configuration allows that on loopback only). */
  tls?: ListenerTls | undefined;
  /** Counts and times every RPC under `service` = this listener's name; undefined: not instrumented. */
  metrics?: Metrics | undefined;
}

/** A listener that is serving. */
export interface RunningListener {
  name: string;
  /** The bound address (the real port when 0 was asked for). */
  address: HostPort;
  /**
   * Stops accepting calls, lets in-flight calls finish for up to graceMs, then
   * cancels whatever is left (grpc-js tryShutdown has no deadline of its own).
   */
  shutdown(graceMs: number): Promise<void>;
  /** Re-reads the TLS certificate files (SIGHUP); a no-op in plaintext. @throws ConfigError, keeping the old certificate. */
  reloadTls(): void;
  /** "tls" or "plaintext", for the start banner. */
  transport: "tls" | "plaintext";
}

let descriptorCache: protoLoader.PackageDefinition | undefined;
/**
 * The descriptors reflection serves: the files exactly as `buf build` wrote
 * them. Not proto-loader's re-encoding, which drops each file's imports and
 * rewrites type names, so grpcurl could list services but not resolve their
 * message types (grpc/grpc-node#3034).
 */
function descriptors(): protoLoader.PackageDefinition {
  if (!descriptorCache) {
    const set = FileDescriptorSet.decode(fs.readFileSync(descriptorSetPath())) as unknown as { file: unknown[] };
    const fileDescriptorProtos = set.file.map((f) => FileDescriptorProto.encode(f as never).finish());
    // @grpc/reflection reads every object in the package definition that has fileDescriptorProtos.
    descriptorCache = { "keycap.descriptors": { fileDescriptorProtos } } as unknown as protoLoader.PackageDefinition;
  }
  return descriptorCache;
}

/**
 * Starts a gRPC server with the given services plus the standard health
 * service (grpc.health.v1) and server reflection limited to those services.
 */
export async function startListener(opts: ListenerOptions): Promise<RunningListener> {
  const server = new Server({
    // Keepalive and size limits are set on purpose, not left to chance.
    "grpc.max_receive_message_length": opts.maxReceiveBytes ?? 4 * 1024 * 1024,
    "grpc.keepalive_time_ms": 60_000,
    "grpc.keepalive_timeout_ms": 20_000,
    "grpc.keepalive_permit_without_calls": 1,
    "grpc.max_connection_age_grace_ms": 30_000,
  });
  const statuses: Record<string, "SERVING"> = { "": "SERVING" };
  const rules = RequestRules.load();
  for (const s of opts.services) {
    const implementation = opts.metrics ? withRpcMetrics(opts.metrics, opts.name, s.definition, s.implementation) : s.implementation;
    server.addService(withRequestRules(withUtf8Check(s.definition), rules), implementation);
    statuses[s.name] = "SERVING";
  }
  const health = new HealthImplementation(statuses);
  health.addToServer(server);
  new ReflectionService(descriptors(), { services: [...opts.services.map((s) => s.name), "grpc.health.v1.Health"] }).addToServer(server);

  const creds = serverCredentials(opts.tls);
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(formatHostPort(opts.address), creds, (err, p) => (err ? reject(bindError(opts.setting, opts.address, err)) : resolve(p)));
  });
  const address = { host: opts.address.host, port };
  const transport = opts.tls ? "tls" : "plaintext";
  opts.logger.info(
    {
      listener: opts.name,
      address: formatHostPort(address),
      transport,
      clientAuth: opts.tls?.clientAuth ?? "none",
      services: opts.services.map((s) => s.name),
    },
    "listening",
  );

  return {
    name: opts.name,
    address,
    transport,
    reloadTls: () => {
      if (creds instanceof ReloadableServerCredentials) {
        creds.reload();
        opts.logger.info({ listener: opts.name }, "TLS certificate reloaded");
      }
    },
    shutdown: async (graceMs) => {
      for (const name of Object.keys(statuses)) health.setStatus(name, "NOT_SERVING");
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          opts.logger.warn({ listener: opts.name, graceMs }, "grace period over; cancelling in-flight calls");
          server.forceShutdown();
          resolve();
        }, graceMs);
        server.tryShutdown(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    },
  };
}

/**
 * Every unary handler of `impl`, timed from its call to its answer and counted by status
 * code. Each method binds its recorder once, so a call costs a clock read and two additions.
 */
function withRpcMetrics(metrics: Metrics, service: string, definition: ServiceDefinition, impl: UntypedServiceImplementation): UntypedServiceImplementation {
  const out: UntypedServiceImplementation = { ...impl };
  for (const [name, method] of Object.entries(definition)) {
    const handler = impl[name];
    if (method.requestStream || method.responseStream || typeof handler !== "function") continue;
    const unary = handler as handleUnaryCall<unknown, unknown>;
    const recorder = metrics.rpc(service, method.path.slice(method.path.lastIndexOf("/") + 1));
    const wrapped: handleUnaryCall<unknown, unknown> = (call, callback) => {
      const started = performance.now();
      unary(call, (err, value, trailer, flags) => {
        recorder.observe(err ? (err.code ?? status.UNKNOWN) : status.OK, (performance.now() - started) / 1000);
        callback(err, value, trailer, flags);
      });
    };
    out[name] = wrapped;
  }
  return out;
}

/**
 * Why a listen address could not be bound, as a ConfigError naming its setting: grpc-js
 * says only "No address added out of total 1 resolved" with the system error inside.
 */
function bindError(setting: string, address: HostPort, err: Error): ConfigError {
  const where = formatHostPort(address);
  if (/EADDRINUSE/.test(err.message)) {
    return new ConfigError(setting, `${where} is already in use (is another keycap running? stop it, or set ${setting} to a free address)`);
  }
  if (/EACCES/.test(err.message)) return new ConfigError(setting, `${where}: not permitted to listen on this port (ports below 1024 need privileges)`);
  if (/EADDRNOTAVAIL/.test(err.message)) return new ConfigError(setting, `${where} is not an address of this machine`);
  const cause = /errors: \[(.*)\]$/.exec(err.message)?.[1] ?? err.message;
  return new ConfigError(setting, `cannot listen on ${where}: ${cause}`);
}

/** grpc-js errors keycap reports itself, better: logged at debug only. */
const SAID_BY_US: readonly RegExp[] = [/^No address added out of total \d+ resolved/];

/**
 * grpc-js's own messages into the service's structured log, instead of bare "E ..." lines on
 * stderr beside the one line a failed start prints.
 */
export function routeGrpcLogs(logger: Logger): void {
  const text = (args: unknown[]): string => args.map(String).join(" ");
  setLogger({
    error: (...args: unknown[]) => {
      const message = text(args);
      // Said in our words, naming the setting, by the listener's start (port in use): grpc-js's is only noise before it.
      if (SAID_BY_US.some((r) => r.test(message))) return logger.debug({ source: "grpc-js" }, message);
      logger.warn({ source: "grpc-js" }, message);
    },
    info: (...args: unknown[]) => logger.info({ source: "grpc-js" }, text(args)),
    debug: (...args: unknown[]) => logger.debug({ source: "grpc-js" }, text(args)),
  });
}
