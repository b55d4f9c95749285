import { status } from "@grpc/grpc-js";

/** The ErrorInfo domain of every keycap error. */
export const ERROR_DOMAIN = "keycap.dev";

/** gRPC codes keycap answers with deliberately. */
export type KeycapCode =
  | typeof status.INVALID_ARGUMENT
  | typeof status.NOT_FOUND
  | typeof status.ALREADY_EXISTS
  | typeof status.PERMISSION_DENIED
  | typeof status.UNAUTHENTICATED
  | typeof status.FAILED_PRECONDITION
  | typeof status.RESOURCE_EXHAUSTED
  | typeof status.UNAVAILABLE
  | typeof status.ABORTED
  | typeof status.INTERNAL
  | typeof status.UNIMPLEMENTED;

/**
 * A deliberate refusal: the only kind of error whose message reaches a client.
 * Domain code throws it with a machine-readable `reason` (UPPER_SNAKE_CASE);
 * the gRPC layer turns it into a status with a google.rpc.ErrorInfo.
 *
 * @example throw new KeycapError(status.INVALID_ARGUMENT, "KEY_FIELD_MISSING", "arguments: /order_id is missing", { field: "/order_id" })
 */
export class KeycapError extends Error {
  constructor(
    readonly code: KeycapCode,
    readonly reason: string,
    message: string,
    readonly metadata: Readonly<Record<string, string>> = {},
  ) {
    super(message);
    this.name = "KeycapError";
  }
}

/** Shorthand for the most common refusal: bad input. */
export function invalidArgument(
  reason: string,
  message: string,
  metadata: Record<string, string> = {},
): KeycapError {
  return new KeycapError(status.INVALID_ARGUMENT, reason, message, metadata);
}
