/**
 * Reading the standard error details keycap puts in the grpc-status-details-bin
 * trailer: google.rpc.ErrorInfo (the machine-readable reason) and
 * google.rpc.RetryInfo (how long to wait before the retry an UNAVAILABLE asks for),
 * google.rpc.BadRequest (the bad fields of an INVALID_ARGUMENT).
 */
import { Metadata } from "@grpc/grpc-js";
import { Status } from "../gen/google/rpc/status";
import { BadRequest, ErrorInfo, RetryInfo } from "../gen/google/rpc/error_details";

const STATUS_DETAILS_KEY = "grpc-status-details-bin";
const ERROR_INFO_TYPE_URL = "type.googleapis.com/google.rpc.ErrorInfo";
const RETRY_INFO_TYPE_URL = "type.googleapis.com/google.rpc.RetryInfo";
const BAD_REQUEST_TYPE_URL = "type.googleapis.com/google.rpc.BadRequest";

export interface ErrorInfoData {
  reason: string;
  domain: string;
  metadata: Record<string, string>;
}

/** The encoded detail of `typeUrl` in an error's status-details trailer, if it has one. */
function detail(err: unknown, typeUrl: string): Uint8Array | undefined {
  if (typeof err !== "object" || err === null || !("metadata" in err)) return undefined;
  const md = (err as { metadata?: unknown }).metadata;
  if (!(md instanceof Metadata)) return undefined;
  const raw = md.get(STATUS_DETAILS_KEY)[0];
  if (!(raw instanceof Buffer)) return undefined;
  try {
    return Status.decode(raw).details.find((any) => any.typeUrl === typeUrl)?.value;
  } catch {
    return undefined;
  }
}

/** Decodes a detail, or undefined when it does not decode (a sender that is not keycap). */
function decoded<T>(bytes: Uint8Array | undefined, decode: (b: Uint8Array) => T): T | undefined {
  if (bytes === undefined) return undefined;
  try {
    return decode(bytes);
  } catch {
    return undefined;
  }
}

/** Reads the google.rpc.ErrorInfo from an error's status-details trailer, if any. */
export function readErrorInfo(err: unknown): ErrorInfoData | undefined {
  const info = decoded(detail(err, ERROR_INFO_TYPE_URL), (b) => ErrorInfo.decode(b));
  return info && { reason: info.reason, domain: info.domain, metadata: { ...info.metadata } };
}

/** The retry delay an error's google.rpc.RetryInfo recommends, in milliseconds, if any. */
export function readRetryDelayMs(err: unknown): number | undefined {
  const d = decoded(detail(err, RETRY_INFO_TYPE_URL), (b) => RetryInfo.decode(b))?.retryDelay;
  return d ? d.seconds * 1000 + Math.floor(d.nanos / 1e6) : undefined;
}

/** One bad field of a refused request, from its google.rpc.BadRequest. */
export interface FieldViolation {
  /** The proto field path, e.g. `tool.effect_class.idempotent.key`. */
  field: string;
  description: string;
  /** The refusal reason for this field (the ErrorInfo reason is the first's). */
  reason: string;
}

/** The field violations of an INVALID_ARGUMENT refusal's google.rpc.BadRequest; [] without one. */
export function readFieldViolations(err: unknown): FieldViolation[] {
  const br = decoded(detail(err, BAD_REQUEST_TYPE_URL), (b) => BadRequest.decode(b));
  return (br?.fieldViolations ?? []).map((v) => ({ field: v.field, description: v.description, reason: v.reason }));
}
