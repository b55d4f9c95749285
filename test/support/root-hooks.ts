import { startTestMongo, stopTestMongo } from "./mongo";
import { TEST_RUNTIME_TOKEN } from "./processes";

// The clients in this process present the services' bootstrap runtime secret by default.
process.env["KEYCAP_RUNTIME_TOKEN"] = TEST_RUNTIME_TOKEN;

/**
 * One real MongoDB-protocol server for the whole run (never a mock): the
 * harness picks mongodb-memory-server or FerretDB and says which.
 */
export const mochaHooks = {
  async beforeAll(this: Mocha.Context): Promise<void> {
    this.timeout(180_000);
    const mongo = await startTestMongo();
    process.stdout.write(`\n  MongoDB backend for this run: ${mongo.backend} (${mongo.reason})\n  ${mongo.uri}\n\n`);
  },
  async afterAll(this: Mocha.Context): Promise<void> {
    this.timeout(30_000);
    await stopTestMongo();
  },
};
