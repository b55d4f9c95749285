/**
 * A grpc-js service implementation behind a sink: every method admits its call first
 * (`authorization: Bearer <capability>`, optional `idempotency-key` metadata) and answers
 * a refusal the way the ledger does (code, message, google.rpc.Status with ErrorInfo).
 */
import type { ServiceDefinition, UntypedServiceImplementation, ServerErrorResponse, Metadata } from "@grpc/grpc-js";
import { KeycapError } from "../../common/src/errors";
import { toServiceError } from "../../common/src/grpc-status";
import { remember } from "./capability-of";
import type { Sink } from "../../capability/src";
import { Reasons, refuse } from "../../common/src/refuse";

interface GrpcCall {
  metadata: Metadata;
  getPeer(): string;
  emit(event: "error", err: ServerErrorResponse): boolean;
}
type Handler = (call: GrpcCall, callback?: (err: ServerErrorResponse | null) => void) => void;

function first(md: Metadata, key: string): string | undefined {
  const v = md.get(key)[0];
  return typeof v === "string" ? v : undefined;
}

/**
 * Wraps every method of `implementation` (unary and streaming) so that it runs only for an
 * admitted call; the handler reads the claims with `capabilityOf(call)`.
 *
 * @example server.addService(PaymentsService, protectService(sink, PaymentsService, { charge }));
 */
export function protectService<T extends UntypedServiceImplementation>(sink: Sink, definition: ServiceDefinition, implementation: T): T {
  const wrapped: UntypedServiceImplementation = {};
  for (const [name, handler] of Object.entries(implementation)) {
    const method = definition[name];
    if (!method) throw new Error(`protectService: ${name} is not a method of the service definition`);
    const unary = !method.requestStream && !method.responseStream;
    const clientStream = method.requestStream && !method.responseStream;
    const original = handler as unknown as Handler;
    const guarded: Handler = (call, callback) => {
      const idempotencyKey = first(call.metadata, "idempotency-key");
      sink
        .admit(first(call.metadata, "authorization"), {
          method: method.path,
          peer: call.getPeer(),
          ...(idempotencyKey !== undefined ? { idempotencyKey } : {}),
        })
        .then(
          (cap) => {
            remember(call, cap);
            original(call, callback);
          },
          (err: unknown) => {
            // Admission only rejects with KeycapErrors; anything else is a defect, said as one.
            const refusal = err instanceof KeycapError ? err : refuse(Reasons.INTERNAL, "the sink failed to admit the call");
            const status = toServiceError(refusal) as ServerErrorResponse;
            if ((unary || clientStream) && callback) callback(status);
            else call.emit("error", status);
          },
        );
    };
    wrapped[name] = guarded as unknown as UntypedServiceImplementation[string];
  }
  return wrapped as T;
}
