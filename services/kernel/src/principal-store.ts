/**
 * Principals: the agent runtimes and operators the kernel answers (DESIGN §9).
 *
 * A principal's bearer secret is 32 random bytes, shown once at creation and stored
 * only as its SHA-256 digest (a unique index finds the principal by it). A plain hash
 * suffices because the secret is random and long, not a password: there is nothing to
 * guess that a slow hash would protect (docs/decisions/0008-principal-credentials.md).
 *
 * Reads are cached per replica for `cacheMs`, so a hot call path costs no database
 * round trip and a revocation is effective on every replica within `cacheMs`.
 */
import { createHash, randomBytes } from "node:crypto";
import type { Collection, Db } from "mongodb";
import { isDuplicateKey } from "../../common/src/mongo";
import { Reasons, refuse } from "../../common/src/refuse";

export type PrincipalRole = "runtime" | "operator";

/** The name of the built-in operator that the admin credential authenticates as. */
export const ADMIN_PRINCIPAL = "admin";

/** A principal as stored; `_id` is its name. */
export interface PrincipalDoc {
  _id: string;
  role: PrincipalRole;
  /** base64url SHA-256 of the bearer secret. */
  secret_sha256: string;
  created_at: Date;
  created_by: string;
  revoked_at?: Date;
  revoked_by?: string;
}

const NAME = /^[A-Za-z0-9._-]{1,64}$/;
const MAX_CACHED = 10_000;

/** Refuses a name that cannot be a principal's. */
export function checkPrincipalName(name: string, field = "name"): void {
  if (!NAME.test(name)) throw refuse(Reasons.INVALID_PRINCIPAL_NAME, `${field} must be 1-64 characters of [A-Za-z0-9._-]`, { field });
}

/** The stored digest of a bearer secret. */
export function secretDigest(secret: string): string {
  return createHash("sha256").update(secret, "utf8").digest("base64url");
}

/** A fresh bearer secret; the prefix lets secret scanners recognise a leaked one. */
export function newSecret(role: PrincipalRole): string {
  return `keycap_${role === "runtime" ? "rt" : "op"}_${randomBytes(32).toString("base64url")}`;
}

interface Cached {
  doc: PrincipalDoc | undefined;
  at: number;
}

/** What {@link PrincipalStore.ensure} found or did. */
export type EnsureOutcome = "created" | "unchanged" | "secret-updated" | "revoked";

export class PrincipalStore {
  private readonly bySecretCache = new Map<string, Cached>();
  private readonly byNameCache = new Map<string, Cached>();

  private constructor(
    private readonly coll: Collection<PrincipalDoc>,
    private readonly cacheMs: number,
    private readonly now: () => number,
  ) {}

  static async open(db: Db, opts: { cacheMs: number; now?: () => number }): Promise<PrincipalStore> {
    const coll = db.collection<PrincipalDoc>("principals");
    await coll.createIndex({ secret_sha256: 1 }, { name: "by_secret", unique: true });
    return new PrincipalStore(coll, opts.cacheMs, opts.now ?? Date.now);
  }

  /** Creates a principal with a fresh secret. @throws ALREADY_EXISTS PRINCIPAL_EXISTS. */
  async create(name: string, role: PrincipalRole, createdBy: string): Promise<{ doc: PrincipalDoc; secret: string }> {
    checkPrincipalName(name);
    if (name === ADMIN_PRINCIPAL) throw refuse(Reasons.PRINCIPAL_NAME_RESERVED, `"${ADMIN_PRINCIPAL}" is the admin credential's principal`, { field: "name" });
    const secret = newSecret(role);
    const doc: PrincipalDoc = { _id: name, role, secret_sha256: secretDigest(secret), created_at: new Date(this.now()), created_by: createdBy };
    try {
      await this.coll.insertOne(doc, { writeConcern: { w: "majority" } });
    } catch (err) {
      if (!isDuplicateKey(err)) throw err;
      throw refuse(Reasons.PRINCIPAL_EXISTS, `principal ${name} already exists (revoked names are not reused)`, { principal: name });
    }
    this.byNameCache.delete(name);
    return { doc, secret };
  }

  /**
   * Makes sure the bootstrap principal `name` exists with `secret` (the local default's
   * runtime, whose secret file is the source of truth). A revoked one stays revoked.
   */
  async ensure(name: string, role: PrincipalRole, secret: string, createdBy: string): Promise<EnsureOutcome> {
    const digest = secretDigest(secret);
    const existing = await this.coll.findOne({ _id: name });
    if (existing?.revoked_at) return "revoked";
    if (existing && existing.secret_sha256 === digest) return "unchanged";
    if (existing) {
      await this.coll.updateOne({ _id: name, revoked_at: { $exists: false } }, { $set: { secret_sha256: digest } }, { writeConcern: { w: "majority" } });
      this.forget();
      return "secret-updated";
    }
    try {
      await this.coll.insertOne(
        { _id: name, role, secret_sha256: digest, created_at: new Date(this.now()), created_by: createdBy },
        { writeConcern: { w: "majority" } },
      );
    } catch (err) {
      // Another replica bootstrapped it at the same moment, with the same file.
      if (!isDuplicateKey(err)) throw err;
    }
    return "created";
  }

  /** The principal holding this secret (revoked ones included), or undefined. Cached. */
  async bySecret(secret: string): Promise<PrincipalDoc | undefined> {
    const digest = secretDigest(secret);
    return this.cached(this.bySecretCache, digest, () => this.coll.findOne({ secret_sha256: digest }));
  }

  /** The principal with this name (revoked ones included), or undefined. Cached. */
  async byName(name: string): Promise<PrincipalDoc | undefined> {
    return this.cached(this.byNameCache, name, () => this.coll.findOne({ _id: name }));
  }

  /** A page of principals ordered by name, after `afterName`. */
  list(afterName: string, limit: number): Promise<PrincipalDoc[]> {
    return this.coll
      .find(afterName ? { _id: { $gt: afterName } } : {})
      .sort({ _id: 1 })
      .limit(limit)
      .toArray();
  }

  /** Revokes; @returns the principal after, and whether it was revoked already. @throws NOT_FOUND. */
  async revoke(name: string, by: string): Promise<{ doc: PrincipalDoc; alreadyRevoked: boolean }> {
    checkPrincipalName(name);
    const before = await this.coll.findOne({ _id: name });
    if (!before) throw refuse(Reasons.PRINCIPAL_NOT_FOUND, `no principal named ${name}`, { principal: name });
    if (before.revoked_at) return { doc: before, alreadyRevoked: true };
    const at = new Date(this.now());
    await this.coll.updateOne({ _id: name }, { $set: { revoked_at: at, revoked_by: by } }, { writeConcern: { w: "majority" } });
    this.forget();
    return { doc: { ...before, revoked_at: at, revoked_by: by }, alreadyRevoked: false };
  }

  private async cached(cache: Map<string, Cached>, key: string, load: () => Promise<PrincipalDoc | null>): Promise<PrincipalDoc | undefined> {
    const hit = cache.get(key);
    const t = this.now();
    if (hit && t - hit.at < this.cacheMs) return hit.doc;
    const doc = (await load()) ?? undefined;
    // Unknown secrets are cached too (a flood of guesses costs one read each per cacheMs),
    // within a bound: past it the cache starts over rather than growing.
    if (cache.size >= MAX_CACHED) cache.clear();
    cache.set(key, { doc, at: t });
    return doc;
  }

  private forget(): void {
    this.bySecretCache.clear();
    this.byNameCache.clear();
  }
}
