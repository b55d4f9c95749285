/** A static JWKS read from a file once at start (KEYCAP_JWKS_FILE). */
import type { KeyObject } from "node:crypto";
import { open } from "node:fs/promises";
import { JwksError, parseJwks } from "./jwks";
import type { PublicKeySource } from "./public-key-source";

// A real JWKS is a few hundred bytes per key; anything this large is the wrong file.
const MAX_JWKS_FILE_BYTES = 1024 * 1024;

/**
 * A static JWKS read from a file once at start; for deployments without a kernel link.
 *
 * @example const source = await FileJwksSource.load("/etc/keycap/jwks.json");
 */
export class FileJwksSource implements PublicKeySource {
  private constructor(private readonly keys: ReadonlyMap<string, KeyObject>) {}

  /**
   * Reads and validates the JWKS file.
   *
   * @throws JwksError (one line, naming the path) when the file is unreadable, not a
   *   JWKS, empty, holds private material, or holds a non-Ed25519 key.
   */
  static async load(path: string): Promise<FileJwksSource> {
    let text: string;
    try {
      const fh = await open(path, "r");
      try {
        const st = await fh.stat();
        if (st.size > MAX_JWKS_FILE_BYTES) throw new JwksError(`JWKS file ${path}: is ${st.size} bytes; too large for a JWKS`);
        text = await fh.readFile({ encoding: "utf8" });
      } finally {
        await fh.close();
      }
    } catch (err) {
      if (err instanceof JwksError) throw err;
      const code = typeof err === "object" && err !== null && "code" in err && typeof err.code === "string" ? err.code : "unknown error";
      throw new JwksError(`JWKS file ${path}: cannot be read (${code})`);
    }
    let keys: Map<string, KeyObject>;
    try {
      keys = parseJwks(text);
    } catch (err) {
      throw new JwksError(`JWKS file ${path}: ${err instanceof Error ? err.message : "invalid"}`);
    }
    if (keys.size === 0) throw new JwksError(`JWKS file ${path}: contains no keys`);
    return new FileJwksSource(keys);
  }

  /** @inheritdoc */
  async getKey(kid: string): Promise<KeyObject | undefined> {
    return this.keys.get(kid);
  }
}
