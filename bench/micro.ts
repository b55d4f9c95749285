/**
 * Micro benchmarks of the enforcement primitives, each a tight loop of the project's own
 * code, run in a child process pinned to one core (`taskset -c 0` when available):
 *
 * - key derivation: deriveKey over a parsed 10-field argument object whose derivation
 *   names all 10 fields (RFC 8785 canonical JSON + SHA-256); also with parseArguments;
 * - capability sign: CapabilityMinter.mint (claims check + libsodium Ed25519 sign);
 * - capability verify: CapabilityVerifier.verify (the ledger's one verification
 *   function: header checks, libsodium Ed25519 verify, claim checks), one at a time and 32 in
 *   flight (the verify is synchronous, so 32 in flight shows no parallelism);
 * - raw Ed25519 sign / verify with parsed KeyObjects (node:crypto), for reference: what the capability rows used before ADR 0003 moved to libsodium.
 *
 * Usage: node dist/bench/micro.js [seconds-per-benchmark]  → one JSON object on stdout.
 */
import { generateKeyPairSync, sign, verify } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { CapabilityVerifier } from "../services/capability/src";
import { parseJwks, type PublicKeySource } from "../services/capability/src";
import { CapabilityMinter } from "../services/kernel/src/capability-minter";
import { deriveKey, type KeyDerivationSpec } from "../services/common/src/domain/key-derivation";
import { parseArguments } from "../services/common/src/domain/strict-json";
import { loadOrCreateSigningKeys } from "../services/kernel/src/signing-keys";

/** One micro benchmark's result. */
export interface MicroResult {
  name: string;
  /** Best of the repetitions: what one core can do when nothing else takes it (noise only slows down). */
  opsPerSecond: number;
  /** Median of the repetitions. */
  medianOpsPerSecond: number;
  ops: number;
  seconds: number;
  note: string;
}

/** The 10-field argument object used for key derivation (and by the `call` scenario). */
export function tenFieldArguments(i: number): Record<string, unknown> {
  return {
    order_id: `order-${i}`,
    customer_id: "cus_4f9a0c2e7b",
    amount_cents: 129_900 + (i % 100),
    currency: "EUR",
    description: "Annual plan, 3 seats, invoice INV-2025-00417",
    seats: 3,
    coupon: { code: "SPRING25", percent: 25 },
    tags: ["renewal", "priority"],
    dry_run: false,
    region: "eu-west-1",
  };
}

/** A derivation naming all 10 fields of {@link tenFieldArguments}. */
export const TEN_FIELD_DERIVATION: KeyDerivationSpec = {
  fields: ["/order_id", "/customer_id", "/amount_cents", "/currency", "/description", "/seats", "/coupon", "/tags", "/dry_run", "/region"],
  version: 1,
  contextFields: [],
};

/** Repetitions per benchmark; the time given is shared among them. */
const REPS = 5;

function combine(name: string, note: string, reps: { ops: number; s: number }[]): MicroResult {
  const rates = reps.map((r) => r.ops / r.s).sort((a, b) => a - b);
  return {
    name,
    opsPerSecond: rates[rates.length - 1] ?? Number.NaN,
    medianOpsPerSecond: rates[Math.floor(rates.length / 2)] ?? Number.NaN,
    ops: reps.reduce((a, r) => a + r.ops, 0),
    seconds: reps.reduce((a, r) => a + r.s, 0),
    note,
  };
}

function loop(name: string, seconds: number, note: string, fn: (i: number) => void): MicroResult {
  for (let i = 0; i < 2000; i++) fn(i); // warm up
  const reps: { ops: number; s: number }[] = [];
  let ops = 0;
  for (let r = 0; r < REPS; r++) {
    const start = performance.now();
    const end = start + (seconds * 1000) / REPS;
    const before = ops;
    while (performance.now() < end) {
      for (let j = 0; j < 100; j++) fn(ops++);
    }
    reps.push({ ops: ops - before, s: (performance.now() - start) / 1000 });
  }
  return combine(name, note, reps);
}

async function loopAsync(name: string, seconds: number, inFlight: number, note: string, fn: (i: number) => Promise<unknown>): Promise<MicroResult> {
  for (let i = 0; i < 500; i++) await fn(i);
  const reps: { ops: number; s: number }[] = [];
  let ops = 0;
  for (let r = 0; r < REPS; r++) {
    const start = performance.now();
    const end = start + (seconds * 1000) / REPS;
    const before = ops;
    const worker = async (): Promise<void> => {
      while (performance.now() < end) await fn(ops++);
    };
    await Promise.all(Array.from({ length: inFlight }, worker));
    reps.push({ ops: ops - before, s: (performance.now() - start) / 1000 });
  }
  return combine(name, note, reps);
}

/** Runs every micro benchmark, `seconds` each. */
export async function runMicro(seconds: number): Promise<MicroResult[]> {
  const out: MicroResult[] = [];
  const texts = Array.from({ length: 1024 }, (_, i) => JSON.stringify(tenFieldArguments(i)));
  const parsed = texts.map((t) => parseArguments(t));
  out.push(
    loop("key derivation (10 fields)", seconds, "deriveKey on parsed arguments: RFC 8785 + SHA-256", (i) => {
      deriveKey("bench.call", TEN_FIELD_DERIVATION, parsed[i & 1023]!, { runId: "" });
    }),
  );
  out.push(
    loop("parse + key derivation (10 fields)", seconds, "parseArguments (strict JSON) + deriveKey, as BeginCall does", (i) => {
      deriveKey("bench.call", TEN_FIELD_DERIVATION, parseArguments(texts[i & 1023]!), { runId: "" });
    }),
  );

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-micro-"));
  try {
    const keys = await loadOrCreateSigningKeys(path.join(dir, "signing-keys.json"), { retiredGraceSeconds: 86400 });
    const minter = new CapabilityMinter(keys, { lifetimeSeconds: 600 });
    const key = "p3bQ8Vn1y8a3l1bZ0b1oQm7yq2b9t0Qm1r4m8y1w8Qk";
    out.push(
      await loopAsync("capability sign", seconds, 1, "CapabilityMinter.mint (libsodium Ed25519, byte-identical to jose SignJWT)", (i) =>
        minter.mint({ principal: "bench-runtime", toolId: "bench.write", effect: "idempotent", callId: `c-${i}`, attempt: 1, key }),
      ),
    );
    const tokens = await Promise.all(
      Array.from({ length: 1024 }, (_, i) =>
        minter.mint({ principal: "bench-runtime", toolId: "bench.write", effect: "idempotent", callId: `c-${i}`, attempt: 1, key }),
      ),
    );
    const jwks = keys.publicJwks();
    const parsedKeys = parseJwks(JSON.stringify(jwks));
    const source: PublicKeySource = { getKey: async (kid: string) => parsedKeys.get(kid) };
    const verifier = new CapabilityVerifier(source);
    const bearers = tokens.map((t) => `Bearer ${t.token}`);
    out.push(
      await loopAsync("capability verify (1 in flight)", seconds, 1, "CapabilityVerifier.verify (libsodium Ed25519 verify + claim checks)", (i) =>
        verifier.verify(bearers[i & 1023]),
      ),
    );
    out.push(
      await loopAsync("capability verify (32 in flight)", seconds, 32, "as above, 32 concurrent verifications", (i) => verifier.verify(bearers[i & 1023])),
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }

  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const msg = Buffer.alloc(300, 7);
  const sig = sign(null, msg, privateKey);
  out.push(loop("raw Ed25519 sign", seconds, "node:crypto sign, parsed KeyObject (reference)", () => void sign(null, msg, privateKey)));
  out.push(loop("raw Ed25519 verify", seconds, "node:crypto verify, parsed KeyObject (reference)", () => void verify(null, msg, publicKey, sig)));
  return out;
}

if (require.main === module) {
  const seconds = Number(process.argv[2] ?? "1");
  runMicro(seconds).then(
    (r) => process.stdout.write(JSON.stringify(r) + "\n"),
    (err: unknown) => {
      process.stderr.write(`micro: ${err instanceof Error ? err.stack : String(err)}\n`);
      process.exit(1);
    },
  );
}
