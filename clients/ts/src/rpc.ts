import { Metadata, type CallOptions, type ClientUnaryCall, type ServiceError } from "@grpc/grpc-js";
import { KeycapClientError } from "./errors";

/** A grpc-js unary method in its (request, metadata, options, callback) form. */
type UnaryMethod<Req, Res> = (
  request: Req,
  metadata: Metadata,
  options: Partial<CallOptions>,
  callback: (err: ServiceError | null, res: Res) => void,
) => ClientUnaryCall;

export interface CallSettings {
  /** Deadline for the call, in milliseconds from now. Default 10000. */
  timeoutMs?: number;
  /** Cancels the call. */
  signal?: AbortSignal;
}

/** Calls a unary method as a promise, with a deadline and an AbortSignal; errors become KeycapClientError. */
export function callUnary<Req, Res>(
  method: UnaryMethod<Req, Res>,
  self: object,
  request: Req,
  bearer: string | undefined,
  settings: CallSettings = {},
): Promise<Res> {
  const md = new Metadata();
  if (bearer !== undefined) md.set("authorization", `Bearer ${bearer}`);
  return new Promise<Res>((resolve, reject) => {
    const call = method.call(self, request, md, { deadline: Date.now() + (settings.timeoutMs ?? 10_000) }, (err, res) => {
      settings.signal?.removeEventListener("abort", onAbort);
      if (err) reject(KeycapClientError.from(err));
      else resolve(res);
    });
    const onAbort = (): void => call.cancel();
    settings.signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * Follows page tokens to the end and returns every item: `fetch` gets the token
 * ("" for the first page) and returns that page's items and next token.
 */
export async function collectPages<T>(fetch: (pageToken: string) => Promise<{ items: T[]; nextPageToken: string }>): Promise<T[]> {
  const all: T[] = [];
  let token = "";
  do {
    const page = await fetch(token);
    all.push(...page.items);
    token = page.nextPageToken;
  } while (token);
  return all;
}
