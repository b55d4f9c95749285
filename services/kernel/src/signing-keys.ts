/**
 * The kernel's Ed25519 signing key file: created on first start, loaded on every start,
 * rotated by an operator. The private key never leaves this process; only
 * {@link SigningKeys.publicJwks} is published (GetSigningKeys) for the ledger.
 *
 * File format (JSON, mode 0600):
 *
 *     { "version": 1,
 *       "current": { "kty": "OKP", "crv": "Ed25519", "x": "…", "d": "…",
 *                    "kid": "<RFC 7638 thumbprint>", "alg": "EdDSA", "use": "sig",
 *                    "created_at": <unix s> },
 *       "retired": [ { "kty": "OKP", "crv": "Ed25519", "x": "…", "kid": "…",
 *                      "alg": "EdDSA", "use": "sig", "retired_at": <unix s> } ] }
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from "node:crypto";
import { calculateJwkThumbprint, type JWK } from "jose";
import { open } from "node:fs/promises";
import { CAPABILITY_ALG } from "../../capability/src";
import { errnoCode, SecretFileWriteError, writeSecretFile } from "../../common/src/secret-file";

/** The only file format version this code reads and writes. */
export const SIGNING_KEY_FILE_VERSION = 1;

// A real key file is well under 1 KiB per key; refusing anything huge keeps a wrong path
// (a log file, a disk image) from being slurped into memory at start.
const MAX_FILE_BYTES = 1024 * 1024;

// base64url of exactly 32 bytes, no padding: the size of an Ed25519 public or private key.
const B64URL_32_BYTES = /^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$/;

/**
 * The key file cannot be used. The message is one line naming the path and the problem,
 * so the service can print it and exit; it never contains key material.
 */
export class SigningKeyFileError extends Error {
  constructor(
    readonly path: string,
    readonly problem: string,
  ) {
    super(`signing key file ${path}: ${problem.replace(/[\r\n]+/g, " ")}`);
    this.name = "SigningKeyFileError";
  }
}

/** Options for {@link loadOrCreateSigningKeys} and {@link rotateSigningKeys}. */
export interface SigningKeyOptions {
  /**
   * Seconds a retired key stays in the published JWKS after rotation. Must cover the
   * longest capability lifetime plus clock skew (900 + 5 s by default), or capabilities
   * minted just before a rotation are refused before they expire.
   */
  retiredGraceSeconds: number;
  /** Clock, in milliseconds since the epoch (like `Date.now`). Default `Date.now`. */
  now?: () => number;
}

/** A public key as published in the JWKS: public members only, never `d`. */
export interface PublicSigningJwk {
  kty: "OKP";
  crv: "Ed25519";
  x: string;
  kid: string;
  alg: "EdDSA";
  use: "sig";
}

/** The loaded key file: the current private key (parsed once) and the publishable JWKS. */
export interface SigningKeys {
  /** Path the keys were loaded from. */
  readonly path: string;
  /** Key id of the current key: the RFC 7638 SHA-256 thumbprint, base64url. */
  readonly currentKid: string;
  /** The current Ed25519 private key, parsed once at load. */
  readonly privateKey: KeyObject;
  /**
   * True when group or others have any access to the file (mode & 0o077). The key still
   * loads, because refusing would turn a chmod slip into an outage; the caller warns.
   */
  readonly insecurePermissions: boolean;
  /**
   * The JWKS the ledger verifies with: the current key and the retired keys still inside
   * the grace period (evaluated at call time), public members only.
   */
  publicJwks(): { keys: JWK[] };
}

interface StoredCurrentKey extends PublicSigningJwk {
  d: string;
  created_at: number;
}

interface StoredRetiredKey extends PublicSigningJwk {
  retired_at: number;
}

interface SigningKeyFile {
  version: typeof SIGNING_KEY_FILE_VERSION;
  current: StoredCurrentKey;
  retired: StoredRetiredKey[];
}

interface LoadedFile {
  file: SigningKeyFile;
  privateKey: KeyObject;
  insecurePermissions: boolean;
}

/**
 * Loads the kernel's signing keys from `path`, creating the file (and its directory,
 * mode 0700) with a fresh Ed25519 key when it does not exist.
 *
 * A file that exists but cannot be used is never replaced: that would silently change the
 * kernel's identity and invalidate every outstanding capability.
 *
 * @throws SigningKeyFileError when the file is unreadable, not JSON, not the expected
 *   shape, not Ed25519, or its private key does not match its kid.
 */
export async function loadOrCreateSigningKeys(path: string, opts: SigningKeyOptions): Promise<SigningKeys> {
  checkOptions(opts);
  const now = opts.now ?? Date.now;
  const existing = await readKeyFile(path);
  if (existing) return toSigningKeys(path, existing, opts);

  const fresh = await generateCurrentKey(nowSeconds(now));
  const file: SigningKeyFile = { version: SIGNING_KEY_FILE_VERSION, current: fresh.stored, retired: [] };
  const created = await writeKeyFile(path, file, { replace: false });
  if (!created) {
    // Another process created the file between our read and our link: its key wins, so
    // every kernel sharing the path signs with the same key.
    const theirs = await readKeyFile(path);
    if (!theirs) throw new SigningKeyFileError(path, "was created concurrently and then removed");
    return toSigningKeys(path, theirs, opts);
  }
  return toSigningKeys(path, { file, privateKey: fresh.privateKey, insecurePermissions: false }, opts);
}

/**
 * Rotates the key file at `path`: a new current key is generated, the previous current
 * key moves to `retired` (public part only, with `retired_at` = now), and retired keys
 * already past the grace period are dropped. The file is replaced atomically.
 *
 * Running kernels keep signing with the key they loaded until restarted; the ledger learns
 * the new kid from the JWKS when it first sees it.
 *
 * @throws SigningKeyFileError when the file does not exist or cannot be used (see
 *   {@link loadOrCreateSigningKeys}).
 */
export async function rotateSigningKeys(path: string, opts: SigningKeyOptions): Promise<SigningKeys> {
  checkOptions(opts);
  const now = nowSeconds(opts.now ?? Date.now);
  const existing = await readKeyFile(path);
  if (!existing) throw new SigningKeyFileError(path, "does not exist; there is no key to rotate");

  const previous = existing.file.current;
  const fresh = await generateCurrentKey(now);
  const retired: StoredRetiredKey[] = [
    { ...publicPart(previous), retired_at: now },
    ...existing.file.retired
      .filter((k) => withinGrace(k, now, opts.retiredGraceSeconds))
      .map((k) => ({
        ...publicPart(k),
        retired_at: k.retired_at,
      })),
  ];
  const file: SigningKeyFile = { version: SIGNING_KEY_FILE_VERSION, current: fresh.stored, retired };
  await writeKeyFile(path, file, { replace: true });
  return toSigningKeys(path, { file, privateKey: fresh.privateKey, insecurePermissions: false }, opts);
}

function checkOptions(opts: SigningKeyOptions): void {
  if (!Number.isFinite(opts.retiredGraceSeconds) || opts.retiredGraceSeconds < 0) {
    throw new RangeError("retiredGraceSeconds must be a non-negative number of seconds");
  }
}

function nowSeconds(now: () => number): number {
  return Math.floor(now() / 1000);
}

function withinGrace(key: StoredRetiredKey, now: number, graceSeconds: number): boolean {
  return now - key.retired_at <= graceSeconds;
}

function toSigningKeys(path: string, loaded: LoadedFile, opts: SigningKeyOptions): SigningKeys {
  const now = opts.now ?? Date.now;
  const grace = opts.retiredGraceSeconds;
  const { current, retired } = loaded.file;
  return {
    path,
    currentKid: current.kid,
    privateKey: loaded.privateKey,
    insecurePermissions: loaded.insecurePermissions,
    publicJwks() {
      const t = nowSeconds(now);
      const keys: JWK[] = [publicPart(current), ...retired.filter((k) => withinGrace(k, t, grace)).map(publicPart)];
      // Belt and braces: publicPart copies named members only, but this is the one place
      // where a private key could be published, so check what actually goes out.
      for (const k of keys) {
        if ("d" in k) throw new Error(`refusing to publish private key material (kid ${k.kid ?? "?"})`);
      }
      return { keys };
    },
  };
}

/** Copies the public members only, so no private or extra member can ride along. */
function publicPart(k: PublicSigningJwk): PublicSigningJwk {
  return { kty: "OKP", crv: "Ed25519", x: k.x, kid: k.kid, alg: "EdDSA", use: "sig" };
}

async function generateCurrentKey(createdAt: number): Promise<{ stored: StoredCurrentKey; privateKey: KeyObject }> {
  const { privateKey } = generateKeyPairSync("ed25519");
  const jwk = privateKey.export({ format: "jwk" });
  if (typeof jwk.x !== "string" || typeof jwk.d !== "string") throw new Error("Ed25519 key export lacks x or d");
  const kid = await thumbprint(jwk.x);
  const stored: StoredCurrentKey = {
    kty: "OKP",
    crv: "Ed25519",
    x: jwk.x,
    d: jwk.d,
    kid,
    alg: "EdDSA",
    use: "sig",
    created_at: createdAt,
  };
  return { stored, privateKey };
}

/** RFC 7638 thumbprint (SHA-256, base64url) of an Ed25519 public key. */
function thumbprint(x: string): Promise<string> {
  return calculateJwkThumbprint({ kty: "OKP", crv: "Ed25519", x }, "sha256");
}

/** Reads and validates the file; undefined when it does not exist. */
async function readKeyFile(path: string): Promise<LoadedFile | undefined> {
  let text: string;
  let mode: number;
  try {
    const fh = await open(path, "r");
    try {
      const st = await fh.stat();
      if (!st.isFile()) throw new SigningKeyFileError(path, "is not a regular file");
      if (st.size > MAX_FILE_BYTES) throw new SigningKeyFileError(path, `is ${st.size} bytes; a key file is far smaller`);
      mode = st.mode;
      text = await fh.readFile({ encoding: "utf8" });
    } finally {
      await fh.close();
    }
  } catch (err) {
    if (err instanceof SigningKeyFileError) throw err;
    const code = errnoCode(err);
    if (code === "ENOENT") return undefined;
    throw new SigningKeyFileError(path, `cannot be read (${code ?? "unknown error"})`);
  }

  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    // The SyntaxError's message quotes the input, which here is a private key.
    throw new SigningKeyFileError(path, "is not valid JSON");
  }
  const { file, privateKey } = await validateKeyFile(path, raw);
  return { file, privateKey, insecurePermissions: (mode & 0o077) !== 0 };
}

async function validateKeyFile(path: string, raw: unknown): Promise<{ file: SigningKeyFile; privateKey: KeyObject }> {
  const fail = (problem: string): never => {
    throw new SigningKeyFileError(path, problem);
  };
  if (!isRecord(raw)) return fail("is not a keycap signing key file (expected a JSON object)");
  if (raw["version"] !== SIGNING_KEY_FILE_VERSION) {
    return fail(`has unsupported version ${JSON.stringify(raw["version"]) ?? "(missing)"}; expected ${SIGNING_KEY_FILE_VERSION}`);
  }
  const current = raw["current"];
  if (!isRecord(current)) return fail(`"current" is missing or not an object`);
  const retiredRaw = raw["retired"];
  if (!Array.isArray(retiredRaw)) return fail(`"retired" is missing or not an array`);

  checkPublicMembers(current, `"current"`, fail);
  if (typeof current["d"] !== "string" || !B64URL_32_BYTES.test(current["d"])) {
    fail(`"current" has no valid Ed25519 private key ("d")`);
  }
  if (typeof current["created_at"] !== "number" || !Number.isSafeInteger(current["created_at"])) {
    fail(`"current.created_at" must be a unix time in seconds`);
  }
  const cur = current as unknown as StoredCurrentKey;

  let privateKey: KeyObject;
  try {
    privateKey = createPrivateKey({ key: { kty: "OKP", crv: "Ed25519", x: cur.x, d: cur.d }, format: "jwk" });
  } catch {
    return fail(`"current" is not a usable Ed25519 private key`);
  }
  // Node derives the public key from d and ignores x, so a mismatched x or kid would go
  // unnoticed until the ledger refused every capability. Check both here, at start.
  const derivedX = createPublicKey(privateKey).export({ format: "jwk" }).x;
  if (derivedX !== cur.x) fail(`"current" public key ("x") does not match its private key ("d")`);
  if ((await thumbprint(cur.x)) !== cur.kid) fail(`"current" private key does not match its kid`);

  const retired: StoredRetiredKey[] = [];
  const seen = new Set<string>([cur.kid]);
  for (const [i, r] of retiredRaw.entries()) {
    const where = `"retired[${i}]"`;
    if (!isRecord(r)) return fail(`${where} is not an object`);
    if ("d" in r) fail(`${where} holds private key material ("d"); retired keys keep their public part only`);
    checkPublicMembers(r, where, fail);
    if (typeof r["retired_at"] !== "number" || !Number.isSafeInteger(r["retired_at"])) {
      fail(`${where}.retired_at must be a unix time in seconds`);
    }
    const key = r as unknown as StoredRetiredKey;
    if ((await thumbprint(key.x)) !== key.kid) fail(`${where} public key does not match its kid`);
    if (seen.has(key.kid)) fail(`${where} repeats kid ${key.kid}`);
    seen.add(key.kid);
    retired.push(key);
  }

  const file: SigningKeyFile = { version: SIGNING_KEY_FILE_VERSION, current: cur, retired };
  return { file, privateKey };
}

function checkPublicMembers(k: Record<string, unknown>, where: string, fail: (problem: string) => never): void {
  if (k["kty"] !== "OKP" || k["crv"] !== "Ed25519") {
    fail(`${where} is not an Ed25519 key (need kty "OKP", crv "Ed25519")`);
  }
  if (typeof k["x"] !== "string" || !B64URL_32_BYTES.test(k["x"])) fail(`${where} has no valid public key ("x")`);
  if (typeof k["kid"] !== "string" || k["kid"].length === 0) fail(`${where} has no "kid"`);
  if (k["alg"] !== CAPABILITY_ALG) fail(`${where} must have alg "${CAPABILITY_ALG}"`);
  if (k["use"] !== undefined && k["use"] !== "sig") fail(`${where} must have use "sig" when use is present`);
}

async function writeKeyFile(path: string, file: SigningKeyFile, { replace }: { replace: boolean }): Promise<boolean> {
  try {
    return await writeSecretFile(path, `${JSON.stringify(file, null, 2)}\n`, { replace });
  } catch (err) {
    if (err instanceof SecretFileWriteError) throw new SigningKeyFileError(path, `cannot be written (${err.errno})`);
    throw err;
  }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
