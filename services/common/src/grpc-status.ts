import { requestRefusal } from "./request-refusal";
import { trace } from "@opentelemetry/api";
import { Metadata, status, type ServiceError, type sendUnaryData, type ServerUnaryCall } from "@grpc/grpc-js";
import { Status } from "../../../gen/ts/google/rpc/status";
import { BadRequest, ErrorInfo, RetryInfo } from "../../../gen/ts/google/rpc/error_details";
import { ERROR_DOMAIN, KeycapError } from "./errors";
import type { Logger } from "./logger";
import { isDatabaseUnavailable, isQueryTimeLimit, queryTimeLimitRefusal } from "./mongo";
import { Reasons, refuse } from "./refuse";

const ERROR_INFO_TYPE_URL = "type.googleapis.com/google.rpc.ErrorInfo";
const RETRY_INFO_TYPE_URL = "type.googleapis.com/google.rpc.RetryInfo";
const BAD_REQUEST_TYPE_URL = "type.googleapis.com/google.rpc.BadRequest";
/** What UNAVAILABLE answers recommend waiting before the retry they ask for. */
const RETRY_DELAY = { seconds: 0, nanos: 500_000_000 };
const STATUS_DETAILS_KEY = "grpc-status-details-bin";

/**
 * The one place gRPC errors are built: a KeycapError becomes its code and
 * message plus a binary google.rpc.Status carrying an ErrorInfo in the
 * `grpc-status-details-bin` trailer, so clients in any language can branch on
 * the reason; UNAVAILABLE answers also carry a google.rpc.RetryInfo.
 */
export function toServiceError(err: KeycapError): Partial<ServiceError> {
  const info = ErrorInfo.create({ reason: err.reason, domain: ERROR_DOMAIN, metadata: { ...err.metadata } });
  const details = Status.encode(
    Status.create({
      code: err.code,
      message: err.message,
      details: [
        { typeUrl: ERROR_INFO_TYPE_URL, value: Buffer.from(ErrorInfo.encode(info).finish()) },
        // UNAVAILABLE is keycap's "retry": it says so in the standard detail too.
        ...(err.code === status.UNAVAILABLE
          ? [{ typeUrl: RETRY_INFO_TYPE_URL, value: Buffer.from(RetryInfo.encode({ retryDelay: RETRY_DELAY }).finish()) }]
          : []),
        ...badRequestOf(err),
      ],
    }),
  ).finish();
  const metadata = new Metadata();
  metadata.set(STATUS_DETAILS_KEY, Buffer.from(details));
  return { code: err.code, details: err.message, metadata };
}

/** A google.rpc.BadRequest naming the bad fields of an INVALID_ARGUMENT refusal. */
function badRequestOf(err: KeycapError): { typeUrl: string; value: Buffer }[] {
  if (err.code !== status.INVALID_ARGUMENT) return [];
  const field = err.metadata["field"];
  const fieldViolations = err.violations.length > 0 ? err.violations : field !== undefined ? [{ field, description: err.message, reason: err.reason }] : [];
  if (fieldViolations.length === 0) return [];
  return [
    {
      typeUrl: BAD_REQUEST_TYPE_URL,
      value: Buffer.from(BadRequest.encode({ fieldViolations: fieldViolations.map((v) => ({ ...v, localizedMessage: undefined })) }).finish()),
    },
  ];
}

/** What a client reads back from a keycap error. */
/** Span attribute naming a refusal's reason (ErrorInfo.reason) on the refused RPC's span. */
export const REFUSAL_REASON_ATTRIBUTE = "keycap.refusal.reason";

/** Options of {@link unaryHandler}. */
export interface UnaryHandlerOptions {
  /**
   * Write one structured log record per refusal (method, code, reason, metadata,
   * peer): the audit record of services that keep none of their own. The ledger
   * records its refusals in MongoDB instead.
   */
  logRefusals?: boolean;
  /**
   * Called with every refusal before it is answered (awaited), e.g. to store it. It must
   * not throw; a failure to record is the hook's to log.
   */
  onRefusal?: (err: KeycapError, peer: string) => Promise<void>;
}

/**
 * Wraps a promise-returning handler as a grpc-js unary handler. Only deliberate
 * KeycapErrors reach the caller; anything else is logged here with its stack and
 * answered INTERNAL without detail.
 */
export function unaryHandler<Req, Res>(
  logger: Logger,
  method: string,
  handler: (request: Req, call: ServerUnaryCall<Req, Res>) => Promise<Res>,
  opts: UnaryHandlerOptions = {},
): (call: ServerUnaryCall<Req, Res>, callback: sendUnaryData<Res>) => void {
  return (call, callback) => {
    const refusal = requestRefusal(call.request);
    const run = refusal ? Promise.reject(refusal) : handler(call.request, call);
    run.then(
      (response) => callback(null, response),
      async (err: unknown) => {
        const answer = await settleFailure(logger, method, err, call.getPeer(), opts);
        callback(toServiceError(answer), null);
      },
    );
  };
}

/**
 * What a failed handler answers, and its side effects: a deliberate KeycapError is a
 * refusal (span attribute, `onRefusal`, log line); the database being down is keycap's
 * own unavailability (UNAVAILABLE, no refusal record: the store is what is down); anything
 * else is logged with its stack and answered INTERNAL without detail. Shared by unary
 * handlers and by the items of a batch RPC, so one call is answered the same either way.
 */
export async function settleFailure(logger: Logger, method: string, err: unknown, peer: string, opts: UnaryHandlerOptions = {}): Promise<KeycapError> {
  if (err instanceof KeycapError) {
    // The refusal's reason on the call's span (a no-op with tracing off).
    trace.getActiveSpan()?.setAttribute(REFUSAL_REASON_ATTRIBUTE, err.reason);
    if (opts.onRefusal) await opts.onRefusal(err, peer);
    if (opts.logRefusals) {
      logger.info({ method, code: status[err.code], reason: err.reason, metadata: err.metadata, peer, refusal: err.message }, "refused");
    }
    return err;
  }
  if (isQueryTimeLimit(err)) {
    logger.warn({ method }, "operator query stopped at its time limit");
    return queryTimeLimitRefusal();
  }
  if (isDatabaseUnavailable(err)) {
    const cause = err instanceof Error ? err.message.split("\n")[0] : String(err);
    logger.warn({ method, err: cause }, "database unavailable");
    return refuse(Reasons.DATABASE_UNAVAILABLE, `the database is unavailable (${cause}); retry`);
  }
  logger.error({ method, err }, "unexpected error in handler");
  return refuse(Reasons.INTERNAL, "internal error; see the service log");
}

/** A refusal as the encoded google.rpc.Status a unary answer carries in grpc-status-details-bin (a batch item's error). */
export function encodedStatus(err: KeycapError): Buffer {
  const md = toServiceError(err).metadata;
  const raw = md?.get(STATUS_DETAILS_KEY)[0];
  if (!(raw instanceof Buffer)) throw new Error("toServiceError built no status details");
  return raw;
}

/** Handler that answers UNIMPLEMENTED (for RPCs not built yet). */
export function unimplemented(method: string): (call: unknown, callback: sendUnaryData<never>) => void {
  return (_call, callback) => callback(toServiceError(refuse(Reasons.NOT_IMPLEMENTED, `${method} is not implemented yet`)), null);
}
