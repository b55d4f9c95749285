/**
 * Domain errors, free of any transport: the domain and storage layers throw these, and
 * one layer (grpc-status.ts) answers them as gRPC statuses. make lint holds the domain
 * to it (dependency-cruiser, .dependency-cruiser.cjs).
 */

/** The ErrorInfo domain of every keycap error. */
export const ERROR_DOMAIN = "keycap.dev";

/**
 * The canonical codes keycap answers with deliberately, by their google.rpc.Code numbers
 * (gRPC's status codes are the same numbers; a unit test holds them equal).
 */
export const Code = {
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  UNAUTHENTICATED: 16,
} as const;

/** One of {@link Code}. */
export type KeycapCode = (typeof Code)[keyof typeof Code];

const CODE_NAMES: Record<number, string> = Object.fromEntries(Object.entries(Code).map(([name, n]) => [n, name]));

/** A code's name as refusal records store it, e.g. 7 → PERMISSION_DENIED. */
export function codeName(code: number): string {
  return CODE_NAMES[code] ?? "UNKNOWN";
}

/**
 * A deliberate refusal: the only kind of error whose message reaches a client.
 * Domain code throws it with a machine-readable `reason` (UPPER_SNAKE_CASE);
 * the gRPC layer turns it into a status with a google.rpc.ErrorInfo.
 *
 * @example throw new KeycapError(Code.INVALID_ARGUMENT, "KEY_FIELD_MISSING", "arguments: /order_id is missing", { field: "/order_id" })
 */
/** One bad field of a request (google.rpc.BadRequest.FieldViolation). */
export interface FieldViolation {
  /** The proto field path, e.g. `tool.effect_class.idempotent.key`. */
  field: string;
  description: string;
  reason: string;
}

export class KeycapError extends Error {
  constructor(
    readonly code: KeycapCode,
    readonly reason: string,
    message: string,
    readonly metadata: Readonly<Record<string, string>> = {},
    /** Every bad field, when the request had several; one from `metadata.field` otherwise. */
    readonly violations: readonly FieldViolation[] = [],
  ) {
    super(message);
    this.name = "KeycapError";
  }
}

/** Shorthand for the most common refusal: bad input. */
export function invalidArgument(reason: string, message: string, metadata: Record<string, string> = {}): KeycapError {
  return new KeycapError(Code.INVALID_ARGUMENT, reason, message, metadata);
}
