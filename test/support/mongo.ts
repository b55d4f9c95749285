import * as crypto from "node:crypto";
import { startMongoServer, type MongoServerHandle } from "../../services/common/src/embedded-mongo";
import { createLogger } from "../../services/common/src/logger";

let handle: MongoServerHandle | undefined;

/** Starts the one MongoDB-protocol server of this test run (see root-hooks). */
export async function startTestMongo(): Promise<MongoServerHandle> {
  handle = await startMongoServer({ logger: createLogger("test-harness", "warn") });
  return handle;
}

export async function stopTestMongo(): Promise<void> {
  await handle?.stop();
  handle = undefined;
}

/** The harness server's URI; each suite picks its own database with freshDatabaseName(). */
export function testMongoUri(): string {
  if (!handle) throw new Error("test MongoDB not started: run mocha with the root hooks (.mocharc.json)");
  return handle.uri;
}

export function testMongoBackend(): string {
  return handle?.backend ?? "none";
}

/** A database name no other test uses. */
export function freshDatabaseName(prefix = "t"): string {
  return `${prefix}_${crypto.randomBytes(6).toString("hex")}`;
}
