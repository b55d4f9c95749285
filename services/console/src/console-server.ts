/**
 * The web console's server: sign-in with the admin credential, server-side sessions,
 * CSRF-checked forms, and the routes to each page (console-views.ts) and action
 * (console-settle.ts); headers, cookies and forms in console-http.ts. The pages carry no
 * script at all, so the Content-Security-Policy allows none.
 */
import * as fs from "node:fs";
import * as http from "node:http";
import * as https from "node:https";
import type { ChannelCredentials } from "@grpc/grpc-js";
import { KeycapClientError } from "../../../clients/ts/src";
import type { Logger } from "../../common/src/logger";
import { ConsoleBackend, type Addresses } from "./console-backend";
import {
  checkOrigin,
  ConsoleRefusal,
  cookieValue,
  readForm,
  redirect,
  SECURITY_HEADERS,
  sendHtml,
  SESSION_COOKIE,
  sessionCookie,
  type Form,
} from "./console-http";
import { settleCall, type PageAnswer } from "./console-settle";
import { callSearchView, callsView, callView, entriesView, overviewView, rejectionsView, runView } from "./console-views";
import { errorPage, layout, signInPage, type PageContext } from "./pages";
import { csrfMatches, SessionStore, type Session } from "./sessions";

export { SESSION_COOKIE };
/** The admin credential is the built-in operator "admin" (ADR 0008). */
const OPERATOR = "admin";

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
    sendHtml(res, status, body, headers);
  }

  private cookie(value: string, maxAgeS: number): string {
    return sessionCookie(value, maxAgeS, this.secure);
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
      if (method === "POST") checkOrigin(req, this.secure);
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
    redirect(res, "/", { "Set-Cookie": this.cookie(session.id, 8 * 3600) });
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
          layout(this.ctx(session, p("tool") ? `Tool ${p("tool")}` : "Overview", "overview"), await overviewView(b, p("tool"), p("window"))),
        );
      case "/rejections":
        return this.send(res, 200, layout(this.ctx(session, "Refusals", "rejections"), await rejectionsView(b, url)));
      case "/entries":
        return this.send(res, 200, layout(this.ctx(session, "Entries", "entries"), await entriesView(b, p("key").trim(), p("tool").trim(), p("page"))));
      case "/calls":
        return this.send(res, 200, layout(this.ctx(session, "Calls", "calls"), await callsView(b, session.csrfToken, undefined)));
      case "/call": {
        const a = await callView(b, p("id").trim());
        return this.send(res, a.status, layout(this.ctx(session, a.title, "calls"), a.body));
      }
      case "/run": {
        const a = await runView(b, p("id").trim());
        return this.send(res, a.status, layout(this.ctx(session, a.title, "runs"), a.body));
      }
      case "/calls/search": {
        const a = await callSearchView(b, url);
        return this.send(res, a.status, layout(this.ctx(session, a.title, "calls"), a.body));
      }
      default:
        return this.send(res, 404, layout(this.ctx(session, "Not found", "overview"), errorPage("No such page.")));
    }
  }

  private async post(path: string, form: Form, session: Session, res: http.ServerResponse): Promise<void> {
    if (path === "/signout") {
      this.sessions.end(session.id);
      this.opts.logger.info({ operator: session.operator, peer: session.peer }, "console sign-out");
      return redirect(res, "/signin", { "Set-Cookie": this.cookie("", 0) });
    }
    if (path !== "/calls/settle" && path !== "/calls/settle/confirm") {
      return this.send(res, 404, layout(this.ctx(session, "Not found", "overview"), errorPage("No such action.")));
    }
    const answer: PageAnswer = await settleCall(this.backend(session.token), path, form, session, this.opts.logger);
    return this.send(res, answer.status, layout(this.ctx(session, answer.title, answer.section), answer.body), answer.headers);
  }
}

/** Reads the stylesheet shipped with the console (no external origin is ever referenced). */
export function loadStylesheet(file: string): string {
  return fs.readFileSync(file, "utf8");
}
