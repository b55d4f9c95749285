/**
 * The capability-verification corpus (test/vectors/capability-verification.json): its
 * shape, a checked reader, and how one vector is put to the ledger's verifier.
 * The generator is test/vectors/generate-capability-vectors.ts.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { CAPABILITY_REFUSAL_REASONS, type CapabilityRefusalReason } from "../../services/capability/src";
import { CapabilityVerifier } from "../../services/capability/src";
import { RemoteJwksSource } from "../../services/capability/src";

// Tests run from the repository root (mocha's convention here); __dirname would point
// into the compiled output.
export const CAPABILITY_VECTORS_FILE = path.join(process.cwd(), "test", "vectors", "capability-verification.json");

/** A JWKS as published (or, in a vector about a bad key set, as mis-published). */
export interface VectorJwks {
  keys: Record<string, unknown>[];
}

/** A reason a vector's verdict may name: a verification reason, or a mode-aware sink's refusal of a sandbox capability. */
export type VerdictReason = CapabilityRefusalReason | "SANDBOX_CAPABILITY_NOT_LIVE";

/** What the verifier must answer. */
export type CapabilityVerdict =
  /** Accepted: exactly the object `CapabilityVerifier.verify` returns (claims plus `kid`). */
  | { verified: Record<string, unknown> }
  /** Refused with this reason; `signature_verified` as the refusal reports it. */
  | { refused: VerdictReason; signature_verified: boolean };

/**
 * The mode-aware verifiers that may answer otherwise than `expect` (ADR 0028): the ledger,
 * and `sink`, every sink SDK and MCP middleware (TypeScript, Python, Go).
 */
export const MODE_AWARE_VERIFIERS = ["ledger", "sink"] as const;

/** Verdicts of mode-aware verifiers, where they differ from `expect`. */
export type VerdictsBy = Partial<Record<(typeof MODE_AWARE_VERIFIERS)[number], CapabilityVerdict>>;

/** One verification case. */
export interface CapabilityVector {
  name: string;
  /** Why the case is here and what it pins. */
  note: string;
  /** The compact JWS as presented (may be deliberately broken; "" for no token). */
  token: string;
  /**
   * The `authorization` metadata value when it is not `Bearer <token>`; null when the
   * call carries none.
   */
  authorization?: string | null;
  /** The key set the kernel publishes; null when it cannot be fetched at all. */
  jwks: VectorJwks | null;
  /** Verification time, whole seconds since the epoch. */
  clock: number;
  /** What every verifier that does not know run modes answers (CapabilityVerifier's default, any verifier pinning the live typ). */
  expect: CapabilityVerdict;
  /** Where a mode-aware verifier answers otherwise. */
  expect_by?: VerdictsBy;
}

/** The verdict `verifier` must give: its own when the vector states one, else `expect`. */
export function verdictFor(vector: CapabilityVector, verifier: (typeof MODE_AWARE_VERIFIERS)[number]): CapabilityVerdict {
  return vector.expect_by?.[verifier] ?? vector.expect;
}

/** The verifier settings every vector is checked with (the ledger's defaults). */
export interface VectorVerifierSettings {
  issuer: string;
  audience: string;
  max_token_bytes: number;
  max_lifetime_seconds: number;
  clock_tolerance_seconds: number;
}

/** The whole corpus. */
export interface CapabilityVectorFile {
  profile: string;
  description: string;
  verifier: VectorVerifierSettings;
  /** The fixed test keys, private parts included (published on purpose, test-only). */
  keys: Record<string, Record<string, string>>;
  vectors: CapabilityVector[];
}

/** The corpus as written to disk: two-space JSON and a final newline. */
export function serializeCapabilityVectorFile(file: CapabilityVectorFile): string {
  return `${JSON.stringify(file, null, 2)}\n`;
}

/** Reads and checks the committed corpus. */
export function loadCapabilityVectors(file = CAPABILITY_VECTORS_FILE): CapabilityVectorFile {
  return parseCapabilityVectorFile(fs.readFileSync(file, "utf8"));
}

/**
 * Parses corpus JSON, checking every member it relies on.
 *
 * @throws Error naming the first vector and member that does not fit.
 */
export function parseCapabilityVectorFile(text: string): CapabilityVectorFile {
  const raw: unknown = JSON.parse(text);
  if (!isRecord(raw)) throw new Error("corpus: not a JSON object");
  const { profile, description, verifier, keys, vectors } = raw;
  if (typeof profile !== "string" || typeof description !== "string") throw new Error("corpus: profile and description must be strings");
  if (!isRecord(keys) || !Object.values(keys).every((k) => isRecord(k) && Object.values(k).every((v) => typeof v === "string"))) {
    throw new Error("corpus: keys must map names to JWKs of strings");
  }
  if (!Array.isArray(vectors)) throw new Error("corpus: vectors must be an array");
  const names = new Set<string>();
  return {
    profile,
    description,
    verifier: readSettings(verifier),
    keys: keys as Record<string, Record<string, string>>,
    vectors: vectors.map((v: unknown, i) => {
      const vector = readVector(v, `vector ${i}`);
      if (names.has(vector.name)) throw new Error(`corpus: vector name ${vector.name} repeats`);
      names.add(vector.name);
      return vector;
    }),
  };
}

function readSettings(v: unknown): VectorVerifierSettings {
  if (!isRecord(v)) throw new Error("corpus: verifier must be an object");
  const { issuer, audience, max_token_bytes, max_lifetime_seconds, clock_tolerance_seconds } = v;
  if (typeof issuer !== "string" || typeof audience !== "string") throw new Error("corpus: verifier issuer/audience must be strings");
  for (const n of [max_token_bytes, max_lifetime_seconds, clock_tolerance_seconds]) {
    if (!Number.isSafeInteger(n)) throw new Error("corpus: verifier limits must be integers");
  }
  return {
    issuer,
    audience,
    max_token_bytes: max_token_bytes as number,
    max_lifetime_seconds: max_lifetime_seconds as number,
    clock_tolerance_seconds: clock_tolerance_seconds as number,
  };
}

function readVector(v: unknown, where: string): CapabilityVector {
  if (!isRecord(v)) throw new Error(`corpus: ${where} is not an object`);
  const { name, note, token, authorization, jwks, clock, expect, expect_by } = v;
  if (typeof name !== "string" || name.length === 0) throw new Error(`corpus: ${where} has no name`);
  where = `vector ${name}`;
  if (typeof note !== "string" || note.length === 0) throw new Error(`corpus: ${where} has no note`);
  if (typeof token !== "string") throw new Error(`corpus: ${where}: token must be a string`);
  if (authorization !== undefined && authorization !== null && typeof authorization !== "string") {
    throw new Error(`corpus: ${where}: authorization must be a string or null`);
  }
  if (jwks !== null && !(isRecord(jwks) && Array.isArray(jwks["keys"]) && jwks["keys"].every(isRecord))) {
    throw new Error(`corpus: ${where}: jwks must be null or {"keys": [objects]}`);
  }
  if (!Number.isSafeInteger(clock)) throw new Error(`corpus: ${where}: clock must be whole seconds`);
  const vector: CapabilityVector = {
    name,
    note,
    token,
    jwks: jwks === null ? null : { keys: jwks["keys"] as Record<string, unknown>[] },
    clock: clock as number,
    expect: readVerdict(expect, where),
  };
  if (authorization !== undefined) vector.authorization = authorization;
  if (expect_by !== undefined) vector.expect_by = readVerdictsBy(expect_by, where);
  return vector;
}

function readVerdictsBy(v: unknown, where: string): VerdictsBy {
  if (!isRecord(v)) throw new Error(`corpus: ${where}: expect_by must be an object`);
  const out: VerdictsBy = {};
  for (const [name, verdict] of Object.entries(v)) {
    const known = MODE_AWARE_VERIFIERS.find((m) => m === name);
    if (!known) throw new Error(`corpus: ${where}: expect_by names an unknown verifier ${name}`);
    out[known] = readVerdict(verdict, `${where} (${name})`);
  }
  return out;
}

function readVerdict(v: unknown, where: string): CapabilityVerdict {
  if (isRecord(v) && isRecord(v["verified"]) && Object.keys(v).length === 1) return { verified: v["verified"] };
  if (isRecord(v) && Object.keys(v).length === 2) {
    const { refused, signature_verified } = v;
    if (isRefusalReason(refused) && typeof signature_verified === "boolean") return { refused, signature_verified };
  }
  throw new Error(`corpus: ${where}: expect must be {"verified": {...}} or {"refused": <reason>, "signature_verified": <bool>}`);
}

function isRefusalReason(v: unknown): v is VerdictReason {
  return v === "SANDBOX_CAPABILITY_NOT_LIVE" || (CAPABILITY_REFUSAL_REASONS as readonly unknown[]).includes(v);
}

/** The `authorization` value a vector presents. */
export function authorizationOf(vector: CapabilityVector): string | undefined {
  if (vector.authorization === null) return undefined;
  return vector.authorization ?? `Bearer ${vector.token}`;
}

/**
 * The ledger's verifier as the ledger builds it, for one vector: the corpus settings, the
 * vector's clock, and a {@link RemoteJwksSource} whose fetch answers the vector's JWKS
 * (or fails, when it is null). A fresh source per vector, so nothing is cached across.
 */
export function ledgerVerifierFor(file: CapabilityVectorFile, vector: CapabilityVector, sandbox: "refuse" | "verify" = "verify"): CapabilityVerifier {
  const jwks = vector.jwks;
  const source = new RemoteJwksSource(async () => {
    if (jwks === null) throw new Error("GetSigningKeys at 127.0.0.1:1: connect ECONNREFUSED");
    return JSON.stringify(jwks);
  });
  return new CapabilityVerifier(source, {
    issuer: file.verifier.issuer,
    audience: file.verifier.audience,
    maxTokenBytes: file.verifier.max_token_bytes,
    maxLifetimeSeconds: file.verifier.max_lifetime_seconds,
    clockToleranceSeconds: file.verifier.clock_tolerance_seconds,
    now: () => vector.clock * 1000,
    sandbox,
  });
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
