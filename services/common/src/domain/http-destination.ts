/**
 * The HTTP effect gateway's rules, free of transport and storage (ADR 0019): what a tool's
 * HTTP destination may be, which requests stay inside it, which headers a caller may set,
 * which redirects are followed, and which answers leave a key retryable. The kernel uses
 * {@link normalizeDestination} at registration; the gateway uses the rest per forward.
 */
import { Code, KeycapError } from "../errors";
import { Reasons, refuse } from "../refuse";

/** A tool's HTTP destination, validated and normalised so that equal destinations compare equal. */
export interface HttpDestinationSpec {
  /** The base URL's href; its path always ends with "/". */
  baseUrl: string;
  /** Upper case, sorted, unique. */
  methods: string[];
  /** Lower case, sorted, unique; content-type is kept whether named or not. */
  responseHeaders: string[];
  /** The header carrying the key, as registered ("Idempotency-Key" when none was named). */
  idempotencyHeader: string;
  allowPrivateNetwork: boolean;
}

/** What a RegisterTool request says of the destination (the proto message's fields). */
export interface HttpDestinationInput {
  baseUrl: string;
  methods: readonly string[];
  responseHeaders: readonly string[];
  idempotencyHeader: string;
  allowPrivateNetwork: boolean;
}

export const DEFAULT_IDEMPOTENCY_HEADER = "Idempotency-Key";
const METHODS: ReadonlySet<string> = new Set(["POST", "PUT", "PATCH", "DELETE"]);
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$/;
const FIELD = "tool.http_destination";

function badDestination(field: string, message: string): KeycapError {
  return refuse(Reasons.INVALID_HTTP_DESTINATION, `${FIELD}.${field}: ${message}`, { field: `${FIELD}.${field}` });
}

/**
 * Validates a destination and puts it in its one normal form (the tool's fingerprint covers it).
 * @throws KeycapError INVALID_HTTP_DESTINATION naming the field
 */
export function normalizeDestination(input: HttpDestinationInput): HttpDestinationSpec {
  let url: URL;
  try {
    url = new URL(input.baseUrl);
  } catch {
    throw badDestination("base_url", `${JSON.stringify(input.baseUrl.slice(0, 200))} is not an absolute URL`);
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") throw badDestination("base_url", `scheme must be https or http, got ${url.protocol}`);
  if (url.username !== "" || url.password !== "") throw badDestination("base_url", "must not carry user info (send credentials as headers of each forward)");
  if (url.search !== "" || url.hash !== "") throw badDestination("base_url", "must not have a query or a fragment");
  if (url.hostname === "") throw badDestination("base_url", "must name a host");
  if (!url.pathname.endsWith("/")) url.pathname += "/";

  if (input.methods.length === 0) throw badDestination("methods", "name at least one of POST, PUT, PATCH, DELETE");
  const methods = [...new Set(input.methods)].sort();
  for (const m of methods) if (!METHODS.has(m)) throw badDestination("methods", `${JSON.stringify(m)} is not one of POST, PUT, PATCH, DELETE`);

  const responseHeaders = [...new Set(["content-type", ...input.responseHeaders.map((h) => h.toLowerCase())])].sort();
  for (const h of responseHeaders) if (!TOKEN.test(h)) throw badDestination("response_headers", `${JSON.stringify(h)} is not a header name`);

  const idempotencyHeader = input.idempotencyHeader === "" ? DEFAULT_IDEMPOTENCY_HEADER : input.idempotencyHeader;
  if (!TOKEN.test(idempotencyHeader)) throw badDestination("idempotency_header", `${JSON.stringify(idempotencyHeader)} is not a header name`);

  return { baseUrl: url.href, methods, responseHeaders, idempotencyHeader, allowPrivateNetwork: input.allowPrivateNetwork };
}

function notAllowed(reason: string, message: string, metadata: Record<string, string> = {}): KeycapError {
  return new KeycapError(Code.PERMISSION_DENIED, reason, message, metadata);
}

/** Whether `url` lies under the destination's base URL (same origin, path below the base path). */
export function isUnderBase(dest: HttpDestinationSpec, url: URL): boolean {
  const base = new URL(dest.baseUrl);
  return url.origin === base.origin && url.username === "" && url.password === "" && url.pathname.startsWith(base.pathname);
}

/**
 * The URL a forward goes to: `path` resolved against the base URL (leading slashes are
 * part of "relative to the base", not a way out of it), dot segments resolved first, so
 * "../" cannot climb above the base.
 * @throws KeycapError DESTINATION_NOT_ALLOWED
 */
export function resolveForwardUrl(dest: HttpDestinationSpec, path: string): URL {
  // The URL parser drops tabs and newlines silently; a path holding any control is refused, not cleaned.
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u0020\u007f]/.test(path)) throw notAllowed("DESTINATION_NOT_ALLOWED", "the path holds spaces or control characters");
  const relative = path.replace(/^\/+/, "");
  let url: URL;
  try {
    url = new URL(relative, dest.baseUrl);
  } catch {
    throw notAllowed("DESTINATION_NOT_ALLOWED", `path ${JSON.stringify(path.slice(0, 200))} is not a URL path`);
  }
  url.hash = "";
  if (!isUnderBase(dest, url)) {
    throw notAllowed("DESTINATION_NOT_ALLOWED", `${url.href.slice(0, 300)} is outside the tool's destination ${dest.baseUrl}`, { url: url.href.slice(0, 300) });
  }
  return url;
}

/** @throws KeycapError METHOD_NOT_ALLOWED */
export function checkMethod(dest: HttpDestinationSpec, method: string): string {
  if (!dest.methods.includes(method)) {
    throw notAllowed(
      "METHOD_NOT_ALLOWED",
      `method ${JSON.stringify(method.slice(0, 20))} is not allowed by the tool's destination (${dest.methods.join(", ")})`,
    );
  }
  return method;
}

// Set by the gateway or by the HTTP layer; a caller setting them could smuggle a second
// request, change the target, or replace the kernel's key.
const RESERVED = new Set([
  "host",
  "content-length",
  "transfer-encoding",
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authorization",
  "upgrade",
  "te",
  "trailer",
  "expect",
]);
const MAX_HEADERS = 64;
const MAX_HEADER_BYTES = 16 * 1024;
// Visible ASCII, space and tab: no CR/LF (response splitting), no NUL, nothing a client library would re-encode.
const VALUE = /^[\t\u0020-\u007e]*$/;

/**
 * The caller's headers as they will be sent.
 * @throws KeycapError INVALID_HEADER
 */
export function checkHeaders(dest: HttpDestinationSpec, headers: readonly { name: string; value: string }[]): [string, string][] {
  if (headers.length > MAX_HEADERS) throw refuse(Reasons.INVALID_HEADER, `at most ${MAX_HEADERS} headers`, { field: "headers" });
  let bytes = 0;
  const keyHeader = dest.idempotencyHeader.toLowerCase();
  return headers.map(({ name, value }, i) => {
    const field = `headers[${i}]`;
    if (!TOKEN.test(name)) throw refuse(Reasons.INVALID_HEADER, `${field}: ${JSON.stringify(name.slice(0, 64))} is not a header name`, { field });
    const lower = name.toLowerCase();
    if (RESERVED.has(lower) || lower === keyHeader) {
      throw refuse(Reasons.INVALID_HEADER, `${field}: ${name} is set by the gateway, not by the caller`, { field });
    }
    if (!VALUE.test(value))
      throw refuse(Reasons.INVALID_HEADER, `${field}: the value of ${name} holds characters other than visible ASCII, space and tab`, { field });
    bytes += name.length + value.length;
    if (bytes > MAX_HEADER_BYTES) throw refuse(Reasons.INVALID_HEADER, `headers over ${MAX_HEADER_BYTES} bytes`, { field: "headers" });
    return [name, value];
  });
}

/**
 * Whether an answer leaves the key retryable: 5xx, and the 4xx statuses that say "not now"
 * rather than "no" (timeout, a concurrent request under the key, too early, rate limited).
 * Every other status is the destination's final word on the key.
 */
export function isRetryableStatus(status: number): boolean {
  return status >= 500 || status === 408 || status === 409 || status === 425 || status === 429;
}

/** What to do with a redirect answer. */
export type RedirectDecision = { follow: true; url: URL } | { follow: false; final: true } | { follow: false; refusal: KeycapError };

/**
 * 307 and 308 keep the method and body: followed when the target stays under the base URL.
 * 301, 302 and 303 would turn the write into a GET, another request: they are the answer,
 * stored as it is, when the target stays under the base. A redirect off the destination is
 * never followed (REDIRECT_NOT_ALLOWED).
 */
export function decideRedirect(dest: HttpDestinationSpec, from: URL, status: number, location: string | undefined): RedirectDecision {
  if (location === undefined || location === "") return { follow: false, final: true };
  let target: URL;
  try {
    target = new URL(location, from);
  } catch {
    return { follow: false, refusal: notAllowed("REDIRECT_NOT_ALLOWED", "the destination redirected to an unparsable location") };
  }
  if (!isUnderBase(dest, target)) {
    return {
      follow: false,
      refusal: notAllowed("REDIRECT_NOT_ALLOWED", `the destination redirected off its allow-list, to ${target.href.slice(0, 300)}; not followed`, {
        location: target.href.slice(0, 300),
      }),
    };
  }
  return status === 307 || status === 308 ? { follow: true, url: target } : { follow: false, final: true };
}
