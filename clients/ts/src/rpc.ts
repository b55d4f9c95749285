import { Metadata, status, type CallOptions, type ClientUnaryCall, type ServiceError } from "@grpc/grpc-js";
import { readRetryDelayMs } from "./status-details";
import { KeycapClientError } from "./errors";
import { missingCredentialHint } from "./credentials";
import { explainUnreachable, serviceOf } from "./unreachable";

/** A grpc-js unary method in its (request, metadata, options, callback) form. */
type UnaryMethod<Req, Res> = (
  request: Req,
  metadata: Metadata,
  options: Partial<CallOptions>,
  callback: (err: ServiceError | null, res: Res) => void,
) => ClientUnaryCall;

export interface CallSettings {
  /** Deadline for the call, retries included, in milliseconds from now. Default 10000. */
  timeoutMs?: number;
  /** Cancels the call (one already aborted is never sent). */
  signal?: AbortSignal;
  /**
   * Retry UNAVAILABLE answers with backoff until the deadline. Default true; the client
   * turns it off where a lost answer would make a retry ambiguous (a single-use
   * capability's write).
   */
  retry?: boolean;
}

const FIRST_BACKOFF_MS = 100;
const MAX_BACKOFF_MS = 2000;

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done(): void {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/**
 * The largest credential (capability or principal secret) the client sends. The
 * services refuse anything over 4 KiB with a recorded reason; past ~64 KiB the
 * HTTP/2 layer resets the stream before any handler sees it, so the caller would
 * get a bare INTERNAL and nothing would be recorded. Refused here instead.
 */
/** Whether a call was given settings of its own (then it is sent alone, under them, never in a batch). */
export function hasOwnSettings(s: CallSettings | undefined): boolean {
  return s !== undefined && (s.timeoutMs !== undefined || s.signal !== undefined || s.retry !== undefined);
}

export const MAX_BEARER_BYTES = 16 * 1024;

function tooLarge(bytes: number): KeycapClientError {
  return new KeycapClientError(
    status.INVALID_ARGUMENT,
    "CAPABILITY_TOO_LARGE",
    `the credential is ${bytes} bytes; keycap credentials are at most 4096 bytes, and this client sends none over ${MAX_BEARER_BYTES} (not sent)`,
    {},
  );
}

function cancelled(): KeycapClientError {
  return new KeycapClientError(status.CANCELLED, "CANCELLED", "the call was cancelled by its AbortSignal before it completed", {});
}

/**
 * Calls a unary method as a promise; errors become KeycapClientError. The call waits for
 * the channel to be ready (a service restarting within the deadline is waited for, not
 * failed fast: nothing is sent until it is up), and an UNAVAILABLE answer, the code
 * keycap uses for "retry", is retried with capped exponential backoff and jitter within
 * the same deadline, unless `settings.retry` is false.
 *
 * An error that says the service was never reached names the service, its address and the
 * setting that chose it (explainUnreachable); a kernel call sent without a bearer and
 * refused PRINCIPAL_CREDENTIAL_MISSING says where the default lookup looked
 * (missingCredentialHint). Codes and reasons are the service's.
 */
export async function callUnary<Req, Res>(
  method: UnaryMethod<Req, Res>,
  self: object,
  request: Req,
  bearer: string | undefined,
  settings: CallSettings = {},
): Promise<Res> {
  const timeoutMs = settings.timeoutMs ?? 10_000;
  const deadline = Date.now() + timeoutMs;
  // grpc-js takes wait-for-ready as a metadata option, not a call option.
  const md = new Metadata({ waitForReady: true });
  if (bearer !== undefined) {
    const bytes = Buffer.byteLength(bearer, "utf8");
    if (bytes > MAX_BEARER_BYTES) throw tooLarge(bytes);
    md.set("authorization", `Bearer ${bearer}`);
  }
  for (let attempt = 0; ; attempt++) {
    if (settings.signal?.aborted) throw cancelled();
    try {
      return await callOnce(method, self, request, md, deadline, settings.signal);
    } catch (err) {
      const e = KeycapClientError.from(err);
      const final = (): KeycapClientError => explained(e, method, self, timeoutMs, bearer);
      if (e.code !== status.UNAVAILABLE || settings.retry === false) throw final();
      // The service's google.rpc.RetryInfo, when it sent one, is the least wait.
      const hinted = readRetryDelayMs(e.cause) ?? 0;
      const backoff = Math.max(hinted, Math.min(MAX_BACKOFF_MS, FIRST_BACKOFF_MS * 2 ** attempt) * (0.5 + Math.random() / 2));
      if (Date.now() + backoff >= deadline) throw final();
      await sleep(backoff, settings.signal);
    }
  }
}

/** The error a call ends with, told in terms of the fix where the client knows one (callUnary). */
function explained(e: KeycapClientError, method: unknown, self: object, timeoutMs: number, bearer: string | undefined): KeycapClientError {
  if (bearer === undefined && e.reason === "PRINCIPAL_CREDENTIAL_MISSING" && serviceOf(method) === "keycap.kernel.v1.KernelService") {
    return e.withMessage(`${e.message}; ${missingCredentialHint()}`);
  }
  return explainUnreachable(e, method, self, timeoutMs);
}

function callOnce<Req, Res>(
  method: UnaryMethod<Req, Res>,
  self: object,
  request: Req,
  md: Metadata,
  deadline: number,
  signal: AbortSignal | undefined,
): Promise<Res> {
  return new Promise<Res>((resolve, reject) => {
    const call = method.call(self, request, md, { deadline }, (err, res) => {
      signal?.removeEventListener("abort", onAbort);
      if (err) reject(KeycapClientError.from(err));
      else resolve(res);
    });
    const onAbort = (): void => call.cancel();
    signal?.addEventListener("abort", onAbort, { once: true });
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
