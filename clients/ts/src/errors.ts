import { status, type ServiceError } from "@grpc/grpc-js";
import { readErrorInfo, readFieldViolations, type FieldViolation } from "./status-details";

/**
 * Every error a keycap client raises: the gRPC code, and the machine-readable
 * `reason` from the google.rpc.ErrorInfo the services send. Branch on
 * `reason`, never on the message.
 */
export class KeycapClientError extends Error {
  constructor(
    readonly code: status,
    readonly reason: string,
    message: string,
    readonly metadata: Readonly<Record<string, string>>,
    options?: { cause?: unknown },
    /** For INVALID_ARGUMENT: every bad field the server named (google.rpc.BadRequest). */
    readonly fieldViolations: readonly FieldViolation[] = [],
  ) {
    super(message, options);
    this.name = "KeycapClientError";
  }

  /** The gRPC status name, e.g. "PERMISSION_DENIED". */
  get codeName(): string {
    return status[this.code] ?? String(this.code);
  }

  /**
   * One line for people: "CODE REASON: message", the code once when the service sent
   * no reason of its own (the reason then defaults to the code's name).
   */
  get summary(): string {
    const head = this.reason && this.reason !== this.codeName ? `${this.codeName} ${this.reason}` : this.codeName;
    return this.message ? `${head}: ${this.message}` : head;
  }

  /** The same error (code, reason, metadata, cause, field violations) with another message for people. */
  withMessage(message: string): KeycapClientError {
    return new KeycapClientError(this.code, this.reason, message, this.metadata, { cause: this.cause }, this.fieldViolations);
  }

  /** Normalises anything a call threw. */
  static from(err: unknown): KeycapClientError {
    if (err instanceof KeycapClientError) return err;
    const se = err as Partial<ServiceError>;
    if (typeof se?.code === "number") {
      const info = readErrorInfo(err);
      return new KeycapClientError(
        se.code,
        info?.reason ?? status[se.code] ?? "UNKNOWN",
        se.details || se.message || "",
        info?.metadata ?? {},
        { cause: err },
        readFieldViolations(err),
      );
    }
    return new KeycapClientError(status.UNKNOWN, "UNKNOWN", err instanceof Error ? err.message : String(err), {}, { cause: err });
  }
}
