/**
 * The console's HTTP plumbing: strict security headers on every answer, the session cookie,
 * form bodies (urlencoded, bounded), the same-origin check on forms, and the console's own
 * refusals (an HTTP status with a machine-readable reason).
 */
import type * as http from "node:http";

export const SESSION_COOKIE = "keycap_console";
const MAX_FORM_BYTES = 16 * 1024;

export const SECURITY_HEADERS: Record<string, string> = {
  "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  "X-Content-Type-Options": "nosniff",
  "X-Frame-Options": "DENY",
  // Not no-referrer: under it Chromium sends `Origin: null` with the console's own forms.
  "Referrer-Policy": "same-origin",
  "Cache-Control": "no-store",
  "Cross-Origin-Opener-Policy": "same-origin",
  "Cross-Origin-Resource-Policy": "same-origin",
};

/** A refusal of the console itself: HTTP status, a machine-readable reason (also in X-Keycap-Reason), and a log record. */
export class ConsoleRefusal extends Error {
  constructor(
    readonly status: number,
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

export type Form = Record<string, string>;

export function sendHtml(res: http.ServerResponse, status: number, body: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { ...SECURITY_HEADERS, "Content-Type": "text/html; charset=utf-8", ...headers });
  res.end(body);
}

export function redirect(res: http.ServerResponse, location: string, headers: Record<string, string> = {}): void {
  res.writeHead(303, { ...SECURITY_HEADERS, Location: location, ...headers });
  res.end();
}

/** The session cookie: HttpOnly, SameSite=Strict, Secure when served over HTTPS. */
export function sessionCookie(value: string, maxAgeS: number, secure: boolean): string {
  return `${SESSION_COOKIE}=${value}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAgeS}${secure ? "; Secure" : ""}`;
}

export function cookieValue(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(";")) {
    const [k, ...v] = part.trim().split("=");
    if (k === name) return v.join("=") || undefined;
  }
  return undefined;
}

/** Forms are accepted only from the console's own pages (SameSite=Strict does most; this is the backstop). */
export function checkOrigin(req: http.IncomingMessage, secure: boolean): void {
  const origin = req.headers.origin;
  if (origin === undefined || origin === "null") {
    if (origin === "null") throw new ConsoleRefusal(403, "CONSOLE_ORIGIN_MISMATCH", "cross-origin form refused");
    return;
  }
  const expected = `${secure ? "https" : "http"}://${req.headers.host ?? ""}`;
  if (origin !== expected) throw new ConsoleRefusal(403, "CONSOLE_ORIGIN_MISMATCH", "cross-origin form refused");
}

export async function readForm(req: http.IncomingMessage): Promise<Form> {
  const type = (req.headers["content-type"] ?? "").split(";")[0]?.trim();
  if (type !== "application/x-www-form-urlencoded") throw new ConsoleRefusal(415, "UNSUPPORTED_MEDIA_TYPE", "Forms only.");
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_FORM_BYTES) throw new ConsoleRefusal(413, "FORM_TOO_LARGE", "Form too large.");
    chunks.push(chunk as Buffer);
  }
  const out: Form = {};
  for (const [k, v] of new URLSearchParams(Buffer.concat(chunks).toString("utf8"))) out[k] = v;
  return out;
}
