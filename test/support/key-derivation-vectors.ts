/**
 * The key-derivation vectors (test/vectors/key-derivation.json, ADR 0002): their shape and a
 * reader, for suites that run them through another path than the kernel's (the MCP middleware).
 */
import * as fs from "node:fs";
import * as path from "node:path";

export const KEY_DERIVATION_VECTORS_FILE = path.join(process.cwd(), "test", "vectors", "key-derivation.json");

/** One vector. */
export interface KeyDerivationVector {
  name: string;
  tool_id: string;
  derivation: { fields: string[]; version: number; context_fields?: "run_id"[] };
  context: { run_id?: string; run_id_utf8_hex?: string };
  /** One of the two: the text, or its UTF-8 bytes when they are not well-formed. */
  arguments_json?: string;
  arguments_utf8_hex?: string;
  expect: { key: string; canonical: string } | { error: string };
}

export interface KeyDerivationVectorFile {
  scheme: string;
  limits: { max_bytes: number; max_depth: number };
  vectors: KeyDerivationVector[];
}

export function loadKeyDerivationVectors(file = KEY_DERIVATION_VECTORS_FILE): KeyDerivationVectorFile {
  return JSON.parse(fs.readFileSync(file, "utf8")) as KeyDerivationVectorFile;
}
