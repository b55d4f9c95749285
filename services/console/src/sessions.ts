/**
 * Server-side console sessions: the browser holds only a random id (HttpOnly,
 * SameSite=Strict cookie); the admin credential it signed in with stays here.
 */
import { randomBytes, timingSafeEqual } from "node:crypto";

export interface Session {
  id: string;
  /** The admin credential, checked against the ledger at sign-in. */
  token: string;
  /** Sent back with every form; a POST without it is refused (CSRF). */
  csrfToken: string;
  /** Who signed in (the admin credential is the built-in operator "admin") and from where. */
  operator: string;
  peer: string;
  createdAt: Date;
  lastSeenMs: number;
}

/** Idle sessions end after this long. */
export const SESSION_IDLE_MS = 30 * 60 * 1000;
/** Every session ends this long after sign-in, however active. */
export const SESSION_MAX_MS = 8 * 60 * 60 * 1000;

export class SessionStore {
  private readonly sessions = new Map<string, Session>();

  constructor(private readonly now: () => number = Date.now) {}

  create(token: string, operator: string, peer: string): Session {
    this.prune();
    const session: Session = {
      id: randomBytes(32).toString("base64url"),
      token,
      csrfToken: randomBytes(32).toString("base64url"),
      operator,
      peer,
      createdAt: new Date(this.now()),
      lastSeenMs: this.now(),
    };
    this.sessions.set(session.id, session);
    return session;
  }

  /** The live session with this id, its idle clock restarted; undefined when none. */
  get(id: string | undefined): Session | undefined {
    if (id === undefined) return undefined;
    const s = this.sessions.get(id);
    if (!s) return undefined;
    const t = this.now();
    if (t - s.lastSeenMs > SESSION_IDLE_MS || t - s.createdAt.getTime() > SESSION_MAX_MS) {
      this.sessions.delete(id);
      return undefined;
    }
    s.lastSeenMs = t;
    return s;
  }

  end(id: string): void {
    this.sessions.delete(id);
  }

  /** Ends every session signed in with this credential (it was refused: rotated or revoked). */
  endAllWithToken(token: string): void {
    for (const [id, s] of this.sessions) if (s.token === token) this.sessions.delete(id);
  }

  private prune(): void {
    for (const id of [...this.sessions.keys()]) this.get(id);
  }
}

/** Constant-time comparison of a submitted CSRF token with the session's. */
export function csrfMatches(session: Session, submitted: string | undefined): boolean {
  if (submitted === undefined) return false;
  const a = Buffer.from(session.csrfToken);
  const b = Buffer.from(submitted);
  return a.length === b.length && timingSafeEqual(a, b);
}
