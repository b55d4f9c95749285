/**
 * node:http (and Express-compatible) handlers behind a sink. The capability comes in
 * `Authorization: Bearer <capability>` by default, or in a header of the service's
 * choosing when its Authorization carries its own users' credentials; a refusal is an
 * RFC 9457 problem document (ADR 0013 §8).
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { Code, KeycapError } from "../../common/src/errors";
import { remember } from "./capability-of";
import type { Sink } from "../../capability/src";
import { Reasons, refuse } from "../../common/src/refuse";

/** Options of {@link protectHttp} and {@link sinkMiddleware}. */
export interface HttpSinkOptions {
  /** Header carrying the capability (lowercase). Default "authorization". */
  header?: string;
}

const HTTP_STATUS: Record<number, number> = {
  [Code.INVALID_ARGUMENT]: 400,
  [Code.UNAUTHENTICATED]: 401,
  [Code.PERMISSION_DENIED]: 403,
  [Code.NOT_FOUND]: 404,
  [Code.ALREADY_EXISTS]: 409,
  [Code.FAILED_PRECONDITION]: 409,
  [Code.ABORTED]: 409,
  [Code.RESOURCE_EXHAUSTED]: 429,
  [Code.UNAVAILABLE]: 503,
};

/** The HTTP status a refusal is answered with. */
export function httpStatusOf(err: KeycapError): number {
  return HTTP_STATUS[err.code] ?? 500;
}

/** Writes a refusal as application/problem+json. */
export function writeProblem(res: ServerResponse, err: KeycapError): void {
  const status = httpStatusOf(err);
  const retryable = err.code === Code.UNAVAILABLE;
  const body = JSON.stringify({
    type: `https://keycap.dev/reasons/${err.reason}`,
    title: err.reason,
    status,
    detail: err.message,
    reason: err.reason,
    retryable,
  });
  res.statusCode = status;
  res.setHeader("content-type", "application/problem+json");
  res.setHeader("cache-control", "no-store");
  if (retryable) res.setHeader("retry-after", "1");
  if (status === 401) res.setHeader("www-authenticate", 'Bearer realm="keycap"');
  res.end(body);
}

function headerValue(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** Admits `req`; resolves true when the handler may run, false when a refusal was written. */
async function admitHttp(sink: Sink, req: IncomingMessage, res: ServerResponse, opts: HttpSinkOptions): Promise<boolean> {
  const header = (opts.header ?? "authorization").toLowerCase();
  let authorization = headerValue(req, header);
  // A header of the service's own may carry the bare token; Authorization always says Bearer.
  if (authorization !== undefined && header !== "authorization" && !/^bearer /i.test(authorization)) authorization = `Bearer ${authorization}`;
  const idempotencyKey = headerValue(req, "idempotency-key");
  const peer = `${req.socket.remoteAddress ?? ""}:${req.socket.remotePort ?? ""}`;
  const path = (req.url ?? "/").split("?")[0] ?? "/";
  try {
    const cap = await sink.admit(authorization, {
      method: `HTTP ${req.method ?? "GET"} ${path}`,
      peer,
      ...(idempotencyKey !== undefined ? { idempotencyKey } : {}),
    });
    remember(req, cap);
    return true;
  } catch (err) {
    writeProblem(res, err instanceof KeycapError ? err : refuse(Reasons.INTERNAL, "the sink failed to admit the request"));
    return false;
  }
}

/**
 * A node:http request listener that runs `handler` only for admitted requests; the handler
 * reads the claims with `capabilityOf(req)`.
 *
 * @example http.createServer(protectHttp(sink, (req, res) => { const { key } = capabilityOf(req); ... }));
 */
export function protectHttp(
  sink: Sink,
  handler: (req: IncomingMessage, res: ServerResponse) => void | Promise<void>,
  opts: HttpSinkOptions = {},
): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    void admitHttp(sink, req, res, opts)
      .then(async (ok) => {
        if (ok) await handler(req, res);
      })
      .catch(() => {
        // The handler's own failure: answer it rather than leave the request hanging.
        if (!res.headersSent) writeProblem(res, refuse(Reasons.INTERNAL, "the handler failed"));
        else res.destroy();
      });
  };
}

/** Express / Connect-style middleware: `app.use(sinkMiddleware(sink))`. */
export function sinkMiddleware(sink: Sink, opts: HttpSinkOptions = {}): (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void {
  return (req, res, next) => {
    admitHttp(sink, req, res, opts).then((ok) => {
      if (ok) next();
    }, next);
  };
}
