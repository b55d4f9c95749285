import { connectivityState, status, type Client } from "@grpc/grpc-js";
import { KeycapClientError } from "./errors";

/** A keycap service as a person knows it, and the client setting that chose its address (after "comes from"). */
interface ServiceName {
  what: string;
  setting: string;
}

/** By the gRPC service of a method's path ("/keycap.kernel.v1.KernelService/BeginCall"). */
const SERVICES: Readonly<Record<string, ServiceName>> = {
  "keycap.kernel.v1.KernelService": {
    what: "keycap kernel",
    setting: "new KernelClient(address) (keycap's CLI and examples read KEYCAP_KERNEL_ADDRESS, default 127.0.0.1:50051)",
  },
  "keycap.kernel.v1.AccessService": {
    what: "keycap kernel",
    setting: "new AccessClient(address) (keycap's CLI reads KEYCAP_KERNEL_ADDRESS, default 127.0.0.1:50051)",
  },
  "keycap.ledger.v1.LedgerService": {
    what: "keycap ledger",
    setting: "KernelClient's ledgerAddress option or new LedgerClient(address) (keycap's examples read KEYCAP_LEDGER_ADDRESS, default 127.0.0.1:50052)",
  },
  "keycap.ledger.v1.LedgerAdminService": {
    what: "keycap ledger admin service",
    setting: "new AdminClient(address) (keycap's CLI reads KEYCAP_ADMIN_ADDRESS, default 127.0.0.1:50053)",
  },
  "keycap.gateway.v1.GatewayService": {
    what: "keycap gateway",
    setting: "new GatewayClient(address) (`make run`'s gateway listens on 127.0.0.1:50055)",
  },
};

/** The gRPC service of a grpc-js client method (its `path`, "/pkg.Service/Method"), or "". */
export function serviceOf(method: unknown): string {
  const p = (method as { path?: unknown }).path;
  return typeof p === "string" ? (p.split("/")[1] ?? "") : "";
}

/** The address a grpc-js client dials, as the caller wrote it ("dns:" dropped). */
function addressOf(client: Client): string {
  return client
    .getChannel()
    .getTarget()
    .replace(/^dns:(\/\/[^/]*\/)?/, "");
}

/**
 * Whether `e` says that the service was never reached: UNAVAILABLE, or DEADLINE_EXCEEDED,
 * without a keycap reason (a service that answers sends one) and, for a deadline, without
 * grpc-js naming the connection the call went out on.
 */
function neverReached(e: KeycapClientError): boolean {
  if (e.reason !== e.codeName) return false;
  if (e.code === status.UNAVAILABLE) return true;
  if (e.code !== status.DEADLINE_EXCEEDED) return false;
  const details = String((e.cause as { details?: unknown } | undefined)?.details ?? e.message);
  return !/remote_addr=/.test(details);
}

/** grpc-js's reason in words, where it names one. */
function causeOf(e: KeycapClientError, state: connectivityState): string {
  const text = `${e.message} ${String((e.cause as { details?: unknown } | undefined)?.details ?? "")}`;
  if (/ECONNREFUSED/.test(text)) return "the connection was refused";
  if (/ENOTFOUND|EAI_AGAIN|name resolution failed/i.test(text)) return "the host name does not resolve";
  if (state === connectivityState.TRANSIENT_FAILURE) return "no connection could be made";
  if (state === connectivityState.CONNECTING || state === connectivityState.IDLE) return "no connection was made yet";
  return "no answer came";
}

/**
 * `e` with a message that names the service, its address and the setting that chose it,
 * when `e` says the service could not be reached (neverReached); any other error as is.
 * The code and reason are kept (UNAVAILABLE stays retryable), and so is grpc-js's error,
 * as the cause.
 *
 * @param method the grpc-js client method called (its path names the service).
 * @param client the grpc-js client it was called on (its channel names the address).
 * @param timeoutMs the call's deadline, for the message.
 */
export function explainUnreachable(e: KeycapClientError, method: unknown, client: object, timeoutMs: number): KeycapClientError {
  if (!neverReached(e)) return e;
  const named = SERVICES[serviceOf(method)];
  if (named === undefined || typeof (client as Partial<Client>).getChannel !== "function") return e;
  const grpcClient = client as Client;
  const address = addressOf(grpcClient);
  const state = grpcClient.getChannel().getConnectivityState(false);
  const within = `${+(timeoutMs / 1000).toFixed(3)} s`;
  const message =
    `the ${named.what} at ${address} could not be reached (${causeOf(e, state)}; waited up to ${within}, the call's timeout); ` +
    `is keycap serve (make run) running there? The address comes from ${named.setting}. [grpc: ${e.message}]`;
  return e.withMessage(message);
}
