/**
 * The benchmarks' peer (bench/README.md, scenario `peer-powertools`): the same effect
 * through the idempotency layer a user would pick instead of keycap, AWS Powertools for
 * TypeScript (`@aws-lambda-powertools/idempotency`: `makeIdempotent` + `IdempotencyConfig`)
 * with its Redis persistence layer (`CachePersistenceLayer` from `.../idempotency/cache`
 * on a `@redis/client` client), around the very insert the baseline does
 * (bench/baseline-server.ts: `EntryStore.insert` of the same document, same collection,
 * same unique `_id`).
 *
 * It serves keycap.bench.v1.BaselineService (the Write shape fits: a caller-chosen key
 * and a payload) in a process of its own (`node dist/bench/peer-server.js`, started by
 * bench/stack.ts with KEYCAP_BENCH_REDIS_URL), through the same listener machinery and
 * MongoDB settings as the ledger. What it gives: the caller's key is trusted as is; a
 * repeat of a completed key returns the stored response (Redis) without running the
 * insert; a repeat while the first is in flight is refused (ABORTED). Nothing at the sink
 * checks anything: any process holding the database credentials writes whatever it likes.
 *
 * The in-process peer (scenario `peer-inproc`, openInProcessPeer) is the same writer
 * (openPeerWriter) inside the load-driving process, called without an RPC.
 */
import { status, type ServerUnaryCall } from "@grpc/grpc-js";
import { IdempotencyAlreadyInProgressError, IdempotencyConfig, makeIdempotent } from "@aws-lambda-powertools/idempotency";
import { CachePersistenceLayer } from "@aws-lambda-powertools/idempotency/cache";
import { createClient } from "@redis/client";
import { BaselineServiceService, WriteResponse, type BaselineServiceServer, type WriteRequest } from "../gen/ts/keycap/bench/v1/baseline";
import type { KeycapConfig } from "../services/common/src/config";
import { KeycapError } from "../services/common/src/errors";
import type { ServiceBinding } from "../services/common/src/grpc-server";
import { unaryHandler } from "../services/common/src/grpc-status";
import type { Logger } from "../services/common/src/logger";
import { connectMongo } from "../services/common/src/mongo";
import { runServices, type RunningService, type ServiceDeps } from "../services/common/src/service-runner";
import { EntryStore } from "../services/ledger/src/entry-store";
import { BaselineWriter, startBenchWriter } from "./baseline-server";

/** The peer's Redis, from bench/stack.ts. */
export const PEER_REDIS_URL_ENV = "KEYCAP_BENCH_REDIS_URL";
/** Prefix of the peer's Redis keys (Powertools would otherwise take the Lambda function's name). */
export const PEER_KEY_PREFIX = "keycap-bench-peer";

/** What Powertools' idempotent function receives: the event it hashes the key from. */
interface PeerEvent {
  /** The caller's idempotency key (IdempotencyConfig.eventKeyJmesPath = "key"). */
  key: string;
}

/** The request as the idempotent function's second argument (not hashed). */
type Write = (event: PeerEvent, req: WriteRequest) => Promise<unknown>;

/**
 * Write, made idempotent by Powertools: Redis `SET NX` of an INPROGRESS record, the
 * insert, `SET` of the COMPLETED record with the JSON response; a completed key
 * returns the stored response instead.
 */
export class PeerWriter {
  private readonly idempotent: Write;

  constructor(writer: BaselineWriter, persistenceStore: CachePersistenceLayer, expiresAfterSeconds = 3600, inProgressMs = 30_000) {
    const config = new IdempotencyConfig({
      eventKeyJmesPath: "key",
      throwOnNoIdempotencyKey: true,
      expiresAfterSeconds,
      // Outside Lambda there is no invocation deadline; this stands in for one, so an
      // in-progress record left by a crash expires after inProgressMs (Powertools' orphan
      // recovery) instead of blocking its key for expiresAfterSeconds; without it
      // Powertools also console.warns on every call.
      lambdaContext: { getRemainingTimeInMillis: () => inProgressMs },
      // A replay answers with the response of the first call, marked as a duplicate.
      responseHook: (response) => (isJsonObject(response) ? { ...response, duplicate: true } : response),
    });
    const write: Write = async (_event, req) => WriteResponse.toJSON(await writer.write(req));
    // The first argument is the hashed event (Powertools' default for a non-handler function).
    this.idempotent = makeIdempotent(write, { persistenceStore, config, keyPrefix: PEER_KEY_PREFIX });
  }

  async write(req: WriteRequest): Promise<WriteResponse> {
    if (req.key === "") throw new KeycapError(status.INVALID_ARGUMENT, "KEY_MISSING", "key is required");
    try {
      return WriteResponse.fromJSON(await this.idempotent({ key: req.key }, req));
    } catch (err) {
      if (err instanceof IdempotencyAlreadyInProgressError) throw new KeycapError(status.ABORTED, "IN_PROGRESS", "a write with this key is in progress");
      throw err;
    }
  }
}

function isJsonObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The peer as a service binding (keycap.bench.v1.BaselineService). */
export function benchPeerBinding(writer: PeerWriter, logger: Logger): ServiceBinding {
  const implementation: BaselineServiceServer = {
    write: unaryHandler(logger, "PeerWrite", (req: WriteRequest, _call: ServerUnaryCall<WriteRequest, WriteResponse>) => writer.write(req)),
  };
  return { name: "keycap.bench.v1.BaselineService", definition: BaselineServiceService, implementation };
}

/**
 * The peer's writer: Powertools on a Redis client of its own around the baseline's insert
 * into `entries`. What the gRPC peer and the in-process peer share, so the two run the very
 * same code; `release` closes the Redis client.
 */
export async function openPeerWriter(entries: EntryStore, maxPayloadBytes: number, redisUrl: string): Promise<{ writer: PeerWriter; release: () => void }> {
  const redis = await createClient({ url: redisUrl }).connect();
  const writer = new PeerWriter(new BaselineWriter(entries, maxPayloadBytes), new CachePersistenceLayer({ client: redis }));
  return { writer, release: () => redis.destroy() };
}

/** Starts the peer on KEYCAP_LEDGER_LISTEN with the ledger's MongoDB settings and KEYCAP_BENCH_REDIS_URL (see startBenchWriter). */
export async function startPeer(deps: ServiceDeps): Promise<RunningService> {
  const url = process.env[PEER_REDIS_URL_ENV];
  if (!url) throw new Error(`${PEER_REDIS_URL_ENV} is not set`);
  return startBenchWriter("peer", deps, async (entries, logger) => {
    const { writer, release } = await openPeerWriter(entries, deps.config.maxPayloadBytes, url);
    return { service: benchPeerBinding(writer, logger), release };
  });
}

/** The peer inside the calling process (scenario `peer-inproc`). */
export interface InProcessPeer {
  writer: PeerWriter;
  /** Closes the Redis client, the entry store and the MongoDB connection. */
  close(): Promise<void>;
}

/**
 * The peer as a team embedding Powertools in the tool's own process runs it (scenario
 * `peer-inproc`): the same writer as the gRPC peer (openPeerWriter), called directly, no
 * RPC. Its MongoDB connection is opened as startBenchWriter opens the gRPC peer's (the
 * `config` the peer process would load: database, timeout, payload limit).
 */
export async function openInProcessPeer(config: KeycapConfig, mongoUri: string, redisUrl: string): Promise<InProcessPeer> {
  const mongo = await connectMongo(mongoUri, config.mongodbDatabase, config.mongodbTimeoutMs);
  try {
    const entries = await EntryStore.open(mongo.db);
    const { writer, release } = await openPeerWriter(entries, config.maxPayloadBytes, redisUrl);
    return {
      writer,
      close: async () => {
        release();
        await entries.close();
        await mongo.close();
      },
    };
  } catch (err) {
    await mongo.close();
    throw err;
  }
}

if (require.main === module) void runServices("peer", [startPeer]);
