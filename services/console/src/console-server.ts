/**
 * The web console's HTTP side: sign-in with the admin credential, server-side sessions,
 * CSRF-checked forms, strict security headers, and the routes of each page. The pages
 * carry no script at all, so the Content-Security-Policy allows none.
 */
import * as fs from "node:fs";
import * as http from "node:http";
import * as https from "node:https";
import type { ChannelCredentials } from "@grpc/grpc-js";
import { KeycapClientError } from "../../../clients/ts/src";
import type { Logger } from "../../common/src/logger";
import { ConsoleBackend, OVERVIEW_ENTRY_LIMIT, type Addresses } from "./console-backend";
import type { SafeHtml } from "./html";
import {
  callsPage,
  entriesPage,
  errorPage,
  layout,
  notice,
  overviewPage,
  rejectionsPage,
  settleConfirmPage,
  settledPage,
  signInPage,
  stateName,
  type PageContext,
  type RejectionFilterForm,
  type ToolRow,
} from "./pages";
import { bucketRefusals, chartWindow, refusalChart } from "./refusal-chart";
import { csrfMatches, SessionStore, type Session } from "./sessions";

export const SESSION_COOKIE = "keycap_console";
/** The admin credential is the built-in operator "admin" (ADR 0008). */
const OPERATOR = "admin";
const MAX_FORM_BYTES = 16 * 1024;
/** CompleteCall keeps at most 4 KiB of detail; the console's own note takes the rest. */
const MAX_DETAIL_CHARS = 2000;

const SECURITY_HEADERS: Record<string, string> = {
  "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  "X-Content-Type-Options": "nosniff",
  "X-Frame-Options": "DENY",
  // Not no-referrer: under it Chromium sends `Origin: null` with the console's own forms.
  "Referrer-Policy": "same-origin",
  "Cache-Control": "no-store",
  "Cross-Origin-Opener-Policy": "same-origin",
  "Cross-Origin-Resource-Policy": "same-origin",
};

export interface ConsoleServerOptions {
  addresses: Addresses;
  /** Credentials for dialing the ledger admin API and the kernel (TLS with the pinned CA, or plaintext). */
  channelCredentials: () => ChannelCredentials;
  logger: Logger;
  /** Serve HTTPS with this certificate (the Secure cookie flag follows). */
  tls?: { cert: Buffer; key: Buffer };
  /** The stylesheet served at /assets/console.css. */
  stylesheet: string;
}

/** A refusal of the console itself: HTTP status, a machine-readable reason (also in X-Keycap-Reason), and a log record. */
class ConsoleRefusal extends Error {
  constructor(
    readonly status: number,
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

type Form = Record<string, string>;

export class ConsoleServer {
  readonly server: http.Server;
  private readonly sessions = new SessionStore();
  private readonly backends = new Map<string, ConsoleBackend>();
  private readonly secure: boolean;

  constructor(private readonly opts: ConsoleServerOptions) {
    this.secure = opts.tls !== undefined;
    const handler = (req: http.IncomingMessage, res: http.ServerResponse): void => {
      this.handle(req, res).catch((err: unknown) => {
        opts.logger.error({ err: String(err), path: req.url }, "console request failed");
        if (!res.headersSent) this.send(res, 500, layout({ title: "Error", section: "overview" }, errorPage("The console failed to answer; see its log.")));
        else res.end();
      });
    };
    this.server = opts.tls ? https.createServer({ cert: opts.tls.cert, key: opts.tls.key }, handler) : http.createServer(handler);
    this.server.headersTimeout = 10_000;
    this.server.requestTimeout = 30_000;
  }

  close(): void {
    for (const b of this.backends.values()) b.close();
    this.backends.clear();
  }

  private backend(token: string): ConsoleBackend {
    let b = this.backends.get(token);
    if (!b) {
      b = new ConsoleBackend(this.opts.addresses, token, this.opts.channelCredentials);
      this.backends.set(token, b);
    }
    return b;
  }

  private send(res: http.ServerResponse, status: number, body: string, headers: Record<string, string> = {}): void {
    res.writeHead(status, { ...SECURITY_HEADERS, "Content-Type": "text/html; charset=utf-8", ...headers });
    res.end(body);
  }

  private redirect(res: http.ServerResponse, location: string, headers: Record<string, string> = {}): void {
    res.writeHead(303, { ...SECURITY_HEADERS, Location: location, ...headers });
    res.end();
  }

  private cookie(value: string, maxAgeS: number): string {
    return `${SESSION_COOKIE}=${value}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAgeS}${this.secure ? "; Secure" : ""}`;
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://console.invalid");
    const method = req.method ?? "GET";
    const peer = req.socket.remoteAddress ?? "";
    try {
      if (method === "GET" && url.pathname === "/assets/console.css") {
        res.writeHead(200, { ...SECURITY_HEADERS, "Content-Type": "text/css; charset=utf-8", "Cache-Control": "private, max-age=300" });
        res.end(this.opts.stylesheet);
        return;
      }
      if (method === "POST") this.checkOrigin(req);
      if (url.pathname === "/signin") {
        if (method === "GET") return this.send(res, 200, layout({ title: "Sign in", section: "signin" }, signInPage(undefined)));
        if (method === "POST") return await this.signIn(req, res, peer);
        throw new ConsoleRefusal(405, "METHOD_NOT_ALLOWED", "method not allowed");
      }
      const session = this.sessions.get(cookieValue(req.headers.cookie, SESSION_COOKIE));
      if (!session) throw new ConsoleRefusal(401, "CONSOLE_SESSION_MISSING", "Sign in with the admin credential first.");
      if (method === "POST") {
        const form = await readForm(req);
        if (!csrfMatches(session, form["csrf"]))
          throw new ConsoleRefusal(403, "CONSOLE_CSRF_INVALID", "This form is stale or did not come from the console; reload the page and try again.");
        return await this.post(url.pathname, form, session, res);
      }
      if (method !== "GET") throw new ConsoleRefusal(405, "METHOD_NOT_ALLOWED", "method not allowed");
      return await this.get(url, session, res);
    } catch (err) {
      if (err instanceof ConsoleRefusal) return this.refuse(res, err, method, url.pathname, peer);
      const e = KeycapClientError.from(err);
      if (e.codeName === "UNAUTHENTICATED") {
        // The credential stopped working (rotated): every session signed in with it ends.
        const s = this.sessions.get(cookieValue(req.headers.cookie, SESSION_COOKIE));
        if (s) this.sessions.endAllWithToken(s.token);
        return this.refuse(
          res,
          new ConsoleRefusal(401, "ADMIN_CREDENTIAL_INVALID", "The admin credential is no longer accepted; sign in again."),
          method,
          url.pathname,
          peer,
        );
      }
      if (e.codeName === "UNAVAILABLE" || e.codeName === "DEADLINE_EXCEEDED") {
        this.opts.logger.warn({ path: url.pathname, code: e.codeName, reason: e.reason, err: e.message }, "console: a service did not answer");
        return this.send(
          res,
          503,
          layout({ title: "Unavailable", section: "overview" }, errorPage(`A keycap service did not answer (${e.summary}); retry in a moment.`)),
          { "Retry-After": "5" },
        );
      }
      throw err;
    }
  }

  private refuse(res: http.ServerResponse, r: ConsoleRefusal, method: string, path: string, peer: string): void {
    this.opts.logger.warn({ method, path, status: r.status, reason: r.reason, peer }, "console refused");
    const headers = { "X-Keycap-Reason": r.reason };
    if (r.status === 401) {
      // The sign-in page itself, with 401: a browser shows the form, a script sees the status.
      return this.send(res, 401, layout({ title: "Sign in", section: "signin" }, signInPage(r.message)), {
        ...headers,
        "Set-Cookie": this.cookie("", 0),
      });
    }
    return this.send(res, r.status, layout({ title: "Refused", section: "overview" }, errorPage(r.message)), headers);
  }

  /** Forms are accepted only from the console's own pages (SameSite=Strict does most; this is the backstop). */
  private checkOrigin(req: http.IncomingMessage): void {
    const origin = req.headers.origin;
    if (origin === undefined || origin === "null") {
      if (origin === "null") throw new ConsoleRefusal(403, "CONSOLE_ORIGIN_MISMATCH", "cross-origin form refused");
      return;
    }
    const expected = `${this.secure ? "https" : "http"}://${req.headers.host ?? ""}`;
    if (origin !== expected) throw new ConsoleRefusal(403, "CONSOLE_ORIGIN_MISMATCH", "cross-origin form refused");
  }

  private async signIn(req: http.IncomingMessage, res: http.ServerResponse, peer: string): Promise<void> {
    const form = await readForm(req);
    const token = (form["token"] ?? "").trim();
    const refusedPage = (message: string): string => layout({ title: "Sign in", section: "signin" }, signInPage(message));
    if (!/^[\x21-\x7e]{1,4096}$/.test(token)) {
      this.opts.logger.warn({ reason: "ADMIN_CREDENTIAL_MISSING", peer }, "console sign-in refused");
      return this.send(res, 401, refusedPage("Enter the admin credential."), { "X-Keycap-Reason": "ADMIN_CREDENTIAL_MISSING" });
    }
    const probe = new ConsoleBackend(this.opts.addresses, token, this.opts.channelCredentials);
    try {
      await probe.checkCredential();
    } catch (err) {
      const e = KeycapClientError.from(err);
      if (e.codeName === "UNAUTHENTICATED") {
        this.opts.logger.warn({ reason: e.reason, peer }, "console sign-in refused");
        // A slower answer to a wrong credential makes guessing through the form slower too.
        await new Promise((r) => setTimeout(r, 500));
        return this.send(res, 401, refusedPage("The ledger refused this credential."), { "X-Keycap-Reason": e.reason || "ADMIN_CREDENTIAL_INVALID" });
      }
      this.opts.logger.warn({ code: e.codeName, err: e.message }, "console sign-in: the ledger admin API did not answer");
      return this.send(
        res,
        503,
        refusedPage(`Cannot check the credential: the ledger admin API at ${this.opts.addresses.admin()} did not answer (${e.summary}).`),
        {
          "Retry-After": "5",
        },
      );
    } finally {
      probe.close();
    }
    const session = this.sessions.create(token, OPERATOR, peer);
    this.opts.logger.info({ operator: OPERATOR, peer }, "console sign-in");
    this.redirect(res, "/", { "Set-Cookie": this.cookie(session.id, 8 * 3600) });
  }

  private ctx(session: Session, title: string, section: PageContext["section"]): PageContext {
    return { title, section, session: { operator: session.operator, csrfToken: session.csrfToken } };
  }

  private async get(url: URL, session: Session, res: http.ServerResponse): Promise<void> {
    const b = this.backend(session.token);
    const p = (name: string): string => url.searchParams.get(name) ?? "";
    switch (url.pathname) {
      case "/":
        return this.send(
          res,
          200,
          layout(this.ctx(session, p("tool") ? `Tool ${p("tool")}` : "Overview", "overview"), await this.overview(b, p("tool"), p("window"))),
        );
      case "/rejections":
        return this.send(res, 200, layout(this.ctx(session, "Refusals", "rejections"), await this.rejections(b, url)));
      case "/entries":
        return this.send(res, 200, layout(this.ctx(session, "Entries", "entries"), await this.entries(b, p("key").trim(), p("tool").trim(), p("page"))));
      case "/calls":
        return this.send(res, 200, layout(this.ctx(session, "Calls", "calls"), await this.calls(b, session, undefined)));
      default:
        return this.send(res, 404, layout(this.ctx(session, "Not found", "overview"), errorPage("No such page.")));
    }
  }

  private async overview(b: ConsoleBackend, toolParam: string, windowName: string): Promise<SafeHtml> {
    // "(unknown)" selects refusals that no tool id could be attributed to.
    const tool = toolParam === "(unknown)" ? "" : toolParam;
    const w = chartWindow(windowName);
    const now = Date.now();
    const [stats, tools, newest, points] = await Promise.all([
      b.stats(),
      b.tools().catch(() => new Map<string, string>()),
      b.newestEntries(tool),
      b.refusalPoints(tool, new Date(now - w.spanMs)),
    ]);
    const rows = new Map<string, ToolRow>();
    const row = (id: string): ToolRow => {
      let r = rows.get(id);
      if (!r) {
        r = { toolId: id, effect: tools.get(id) ?? "", entries: 0, duplicates: 0, payloadMismatches: 0, refusals: 0 };
        rows.set(id, r);
      }
      return r;
    };
    if (!toolParam) for (const id of tools.keys()) row(id);
    for (const e of newest.entries) {
      const r = row(e.toolId);
      r.entries += 1;
      r.duplicates += Number(e.duplicateCount);
      r.payloadMismatches += Number(e.payloadMismatchCount);
    }
    for (const [id, n] of Object.entries(stats.rejectionsByTool)) if (!toolParam || id === tool) row(id).refusals = Number(n);
    const sorted = [...rows.values()].sort((a, c) => c.refusals - a.refusals || a.toolId.localeCompare(c.toolId));
    const selected = toolParam ? rows.get(tool) : undefined;
    const totals = toolParam
      ? {
          entries: selected?.entries ?? 0,
          duplicates: selected?.duplicates ?? 0,
          payloadMismatches: selected?.payloadMismatches ?? 0,
          rejections: selected?.refusals ?? 0,
        }
      : {
          entries: Number(stats.entries),
          duplicates: Number(stats.duplicates),
          payloadMismatches: Number(stats.payloadMismatches),
          rejections: Number(stats.rejections),
        };
    const caption = `${toolParam ? `Refusals of ${toolParam}` : "All refusals"}, last ${w.name}${points.truncated ? " (newest 5000 records)" : ""}`;
    return overviewPage({
      totals,
      byReason: Object.entries(stats.rejectionsByReason)
        .map(([k, v]): [string, number] => [k, Number(v)])
        .sort((a, c) => c[1] - a[1]),
      tools: sorted,
      entriesScanned: OVERVIEW_ENTRY_LIMIT,
      entriesTruncated: newest.truncated,
      chart: refusalChart(bucketRefusals(points.points, w, now), caption),
      window: w.name,
      ...(toolParam ? { tool: toolParam } : {}),
    });
  }

  private async rejections(b: ConsoleBackend, url: URL): Promise<SafeHtml> {
    const p = (name: string): string => (url.searchParams.get(name) ?? "").trim();
    const f: RejectionFilterForm = { tool: p("tool"), reason: p("reason"), service: p("service"), since: p("since"), until: p("until") };
    const stats = await b.stats();
    const reasons = Object.keys(stats.rejectionsByReason).sort();
    let since: Date | undefined;
    let until: Date | undefined;
    try {
      since = f.since ? parseTime(f.since, "Since") : undefined;
      until = f.until ? parseTime(f.until, "Until") : undefined;
      if (since && until && since.getTime() >= until.getTime()) throw new RangeError("Since must be before Until.");
    } catch (err) {
      return rejectionsPage(f, reasons, [], "", err instanceof Error ? err.message : String(err));
    }
    const page = await b.rejectionsPage(
      { toolId: f.tool, reason: f.reason, service: f.service, ...(since ? { since } : {}), ...(until ? { until } : {}) },
      p("page"),
    );
    return rejectionsPage(f, reasons, page.rejections, page.nextPageToken, undefined);
  }

  private async entries(b: ConsoleBackend, key: string, tool: string, pageToken: string): Promise<SafeHtml> {
    let found;
    let lookupError: string | undefined;
    if (key !== "") {
      found = await b.entryByKey(key);
      if (!found) {
        const n = [...key].length;
        lookupError = `No entry under this key${n !== 43 ? ` (a key is 43 characters; this one has ${n})` : ""}.`;
      }
    }
    const page = await b.entriesPage(tool, pageToken);
    return entriesPage(key, tool, found, lookupError, page.entries, page.nextPageToken);
  }

  private async calls(b: ConsoleBackend, session: Session, message: SafeHtml | undefined): Promise<SafeHtml> {
    const [pending, indeterminate] = await Promise.all([b.pendingCalls(), b.indeterminateCalls()]);
    return callsPage(pending, indeterminate, session.csrfToken, message);
  }

  private async post(path: string, form: Form, session: Session, res: http.ServerResponse): Promise<void> {
    if (path === "/signout") {
      this.sessions.end(session.id);
      this.opts.logger.info({ operator: session.operator, peer: session.peer }, "console sign-out");
      return this.redirect(res, "/signin", { "Set-Cookie": this.cookie("", 0) });
    }
    if (path !== "/calls/settle" && path !== "/calls/settle/confirm") {
      return this.send(res, 404, layout(this.ctx(session, "Not found", "overview"), errorPage("No such action.")));
    }
    const b = this.backend(session.token);
    const callId = form["call_id"] ?? "";
    const outcome = form["outcome"];
    const detail = (form["detail"] ?? "").trim().slice(0, MAX_DETAIL_CHARS);
    if (outcome !== "succeeded" && outcome !== "failed") {
      return this.send(
        res,
        400,
        layout(this.ctx(session, "Calls", "calls"), await this.calls(b, session, notice("error", "Choose an outcome: succeeded or failed."))),
        {
          "X-Keycap-Reason": "OUTCOME_REQUIRED",
        },
      );
    }
    const call = (await b.indeterminateCalls()).find((c) => c.callId === callId) ?? (await b.pendingCalls()).find((c) => c.callId === callId);
    if (path === "/calls/settle") {
      if (!call) {
        return this.send(
          res,
          404,
          layout(this.ctx(session, "Calls", "calls"), await this.calls(b, session, notice("error", `No open call ${callId}: it may be settled already.`))),
          {
            "X-Keycap-Reason": "CALL_NOT_FOUND",
          },
        );
      }
      const recorded = settlementDetail(detail, session, new Date());
      return this.send(
        res,
        200,
        layout(this.ctx(session, "Confirm settlement", "calls"), settleConfirmPage(call, outcome, detail, recorded, session.csrfToken)),
      );
    }
    if (form["confirm"] !== "yes") throw new ConsoleRefusal(400, "CONFIRMATION_REQUIRED", "Settling a call needs the confirmation step.");
    const at = new Date();
    const result = await b.completeCall(callId, outcome, settlementDetail(detail, session, at));
    const settled = result.call;
    this.opts.logger.info(
      {
        callId,
        toolId: settled?.toolId,
        outcome,
        operator: session.operator,
        peer: session.peer,
        alreadyCompleted: result.alreadyCompleted,
        wasState: call ? stateName(call.state) : "",
      },
      "console settled a call",
    );
    if (!settled) return this.send(res, 502, layout(this.ctx(session, "Calls", "calls"), errorPage("The kernel answered without the call.")));
    return this.send(
      res,
      200,
      layout(this.ctx(session, "Call settled", "calls"), settledPage(settled, result.alreadyCompleted, describeOperator(session), at)),
    );
  }
}

function describeOperator(s: Session): string {
  return `${s.operator} (keycap console, from ${s.peer || "unknown address"})`;
}

/** What the kernel journals as the call's outcome detail: the operator's words, then who and when. */
export function settlementDetail(detail: string, s: Session, at: Date): string {
  const who = `settled by ${describeOperator(s)} at ${at.toISOString()}`;
  return detail ? `${detail} — ${who}` : who;
}

function parseTime(value: string, what: string): Date {
  const rel = /^(\d+)([smhd])$/.exec(value);
  if (rel) {
    const unit = { s: 1e3, m: 6e4, h: 3.6e6, d: 8.64e7 }[rel[2] as "s" | "m" | "h" | "d"];
    return new Date(Date.now() - Number(rel[1]) * unit);
  }
  const d = new Date(value);
  if (Number.isNaN(d.getTime())) throw new RangeError(`${what}: expected an ISO time or a duration like 15m, 2h, 1d.`);
  return d;
}

export function cookieValue(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(";")) {
    const [k, ...v] = part.trim().split("=");
    if (k === name) return v.join("=") || undefined;
  }
  return undefined;
}

async function readForm(req: http.IncomingMessage): Promise<Form> {
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

/** Reads the stylesheet shipped with the console (no external origin is ever referenced). */
export function loadStylesheet(file: string): string {
  return fs.readFileSync(file, "utf8");
}
