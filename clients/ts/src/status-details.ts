/**
 * Reading the standard error details keycap puts in the grpc-status-details-bin
 * trailer: google.rpc.ErrorInfo (the machine-readable reason) and
 * google.rpc.RetryInfo (how long to wait before the retry an UNAVAILABLE asks for).
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

/** Reads the google.rpc.ErrorInfo from an error's status-details trailer, if any. */
export function readErrorInfo(err: unknown): ErrorInfoData | undefined {
  if (typeof err !== "object" || err === null || !("metadata" in err)) return undefined;
  const md = (err as { metadata?: unknown }).metadata;
  if (!(md instanceof Metadata)) return undefined;
  const raw = md.get(STATUS_DETAILS_KEY)[0];
  if (!(raw instanceof Buffer)) return undefined;
  try {
    const st = Status.decode(raw);
    for (const any of st.details) {
      if (any.typeUrl === ERROR_INFO_TYPE_URL) {
        const info = ErrorInfo.decode(any.value);
        return { reason: info.reason, domain: info.domain, metadata: { ...info.metadata } };
      }
    }
  } catch {
    return undefined;
  }
  return undefined;
}

/** The retry delay an error's google.rpc.RetryInfo recommends, in milliseconds, if any. */
export function readRetryDelayMs(err: unknown): number | undefined {
  if (typeof err !== "object" || err === null || !("metadata" in err)) return undefined;
  const md = (err as { metadata?: unknown }).metadata;
  if (!(md instanceof Metadata)) return undefined;
  const raw = md.get(STATUS_DETAILS_KEY)[0];
  if (!(raw instanceof Buffer)) return undefined;
  try {
    for (const any of Status.decode(raw).details) {
      if (any.typeUrl !== RETRY_INFO_TYPE_URL) continue;
      const d = RetryInfo.decode(any.value).retryDelay;
      return d ? d.seconds * 1000 + Math.floor(d.nanos / 1e6) : undefined;
    }
  } catch {
    return undefined;
  }
  return undefined;
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
  if (typeof err !== "object" || err === null || !("metadata" in err)) return [];
  const md = (err as { metadata?: unknown }).metadata;
  if (!(md instanceof Metadata)) return [];
  const raw = md.get(STATUS_DETAILS_KEY)[0];
  if (!(raw instanceof Buffer)) return [];
  try {
    for (const any of Status.decode(raw).details) {
      if (any.typeUrl !== BAD_REQUEST_TYPE_URL) continue;
      return BadRequest.decode(any.value).fieldViolations.map((v) => ({ field: v.field, description: v.description, reason: v.reason }));
    }
  } catch {
    return [];
  }
  return [];
}
