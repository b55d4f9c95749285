/**
 * keycap.bench.v1.BaselineService: the benchmarks' baseline (bench/README.md). The same
 * insert as an idempotent ledger Write (same `entries` collection, same document shape,
 * same `idem:<key>` `_id` under the same unique index, same duplicate handling), with a
 * key the client chooses and no capability, no verification, no audit. What a user would
 * write instead of keycap; the enforced Write is measured against it.
 *
 * A process of its own (`node dist/bench/baseline-server.js`, started by bench/stack.ts),
 * through the same listener machinery and MongoDB settings as the ledger. Nothing in
 * `keycap serve` can start it: it writes without any authorisation (DESIGN §9).
 */
import { createHash, randomUUID } from "node:crypto";
import { status, type ServerUnaryCall } from "@grpc/grpc-js";
import { BaselineServiceService, type BaselineServiceServer, type WriteRequest, type WriteResponse } from "../gen/ts/keycap/bench/v1/baseline";
import { KeycapError } from "../services/common/src/errors";
import { startListener, type ServiceBinding } from "../services/common/src/grpc-server";
import { unaryHandler } from "../services/common/src/grpc-status";
import type { Logger } from "../services/common/src/logger";
import { connectMongo } from "../services/common/src/mongo";
import { runServices, type RunningService, type ServiceDeps } from "../services/common/src/service-runner";
import { idempotentEffectId } from "../services/ledger/src/domain/write-rule";
import { EntryStore, type EntryDoc } from "../services/ledger/src/entry-store";
import { newEntryId } from "../services/ledger/src/ledger";
import { entryToProto } from "../services/ledger/src/ledger-proto";
import { BASELINE_TOOL_ID, BENCH_PRINCIPAL } from "./bench-ids";

/** Fully-qualified name of the baseline service. */
export const BENCH_BASELINE_SERVICE_NAME = "keycap.bench.v1.BaselineService";

export { BASELINE_TOOL_ID };

/** The baseline's behaviour: one unique insert, as {@link Ledger.write} does after its checks. */
export class BaselineWriter {
  constructor(
    private readonly entries: EntryStore,
    private readonly maxPayloadBytes: number,
  ) {}

  async write(req: WriteRequest): Promise<WriteResponse> {
    if (req.key === "") throw new KeycapError(status.INVALID_ARGUMENT, "KEY_MISSING", "key is required");
    if (req.payload.length > this.maxPayloadBytes) {
      throw new KeycapError(status.INVALID_ARGUMENT, "PAYLOAD_TOO_LARGE", `payload is ${req.payload.length} bytes; the limit is ${this.maxPayloadBytes}`);
    }
    const effectId = idempotentEffectId(req.key);
    const payloadSha256 = createHash("sha256").update(req.payload).digest("hex");
    const doc: EntryDoc = {
      _id: effectId,
      entry_id: newEntryId(),
      tool_id: BASELINE_TOOL_ID,
      effect: "idempotent",
      // A call id and a capability id of the shape the enforced write records (UUIDs), so
      // the document is the same size; nothing reads them.
      call_id: randomUUID(),
      attempt: 1,
      capability_id: randomUUID(),
      key: req.key,
      request_id: "",
      payload: req.payload,
      payload_sha256: payloadSha256,
      recorded_at: new Date(),
      payload_mismatch: false,
      principal: BENCH_PRINCIPAL,
    };
    if (await this.entries.insert(doc)) return { entry: entryToProto(doc), duplicate: false, payloadMismatch: false };
    // What a user would write instead: on the collision, read the original back.
    const original = await this.entries.findByEffectId(effectId);
    if (!original) throw new KeycapError(status.INTERNAL, "INTERNAL", "entry collided but cannot be found");
    return { entry: entryToProto(original), duplicate: true, payloadMismatch: original.payload_sha256 !== payloadSha256 };
  }
}

/** The baseline as a service binding. */
export function benchBaselineBinding(entries: EntryStore, maxPayloadBytes: number, logger: Logger): ServiceBinding {
  const writer = new BaselineWriter(entries, maxPayloadBytes);
  const implementation: BaselineServiceServer = {
    write: unaryHandler(logger, "BaselineWrite", (req: WriteRequest, _call: ServerUnaryCall<WriteRequest, WriteResponse>) => writer.write(req)),
  };
  return { name: BENCH_BASELINE_SERVICE_NAME, definition: BaselineServiceService, implementation };
}

/**
 * Starts a bench-only writer process (the baseline, the peer) on KEYCAP_LEDGER_LISTEN with
 * the ledger's MongoDB settings and receive limit: the same listener machinery and entry
 * store as the ledger, so the only difference measured is what the binding does.
 * `release` frees what `binding` acquired, after the listener and the database close.
 */
export async function startBenchWriter(
  name: string,
  deps: ServiceDeps,
  binding: (entries: EntryStore, logger: Logger) => Promise<{ service: ServiceBinding; release?: () => void }>,
): Promise<RunningService> {
  const { config } = deps;
  const logger = deps.logger.child({ component: name });
  const mongo = await connectMongo(deps.mongoUri, config.mongodbDatabase, config.mongodbTimeoutMs);
  let release: (() => void) | undefined;
  try {
    const bound = await binding(await EntryStore.open(mongo.db), logger);
    release = bound.release;
    const listener = await startListener({
      name,
      address: config.ledgerListen,
      setting: "KEYCAP_LEDGER_LISTEN",
      logger,
      maxReceiveBytes: 2 * config.maxPayloadBytes + 64 * 1024,
      services: [bound.service],
    });
    return {
      name,
      listeners: [listener],
      stop: async (graceMs) => {
        await listener.shutdown(graceMs);
        await mongo.close();
        release?.();
      },
    };
  } catch (err) {
    await mongo.close();
    release?.();
    throw err;
  }
}

/** Starts the baseline (see {@link startBenchWriter}). */
export function startBaseline(deps: ServiceDeps): Promise<RunningService> {
  return startBenchWriter("baseline", deps, async (entries, logger) => ({ service: benchBaselineBinding(entries, deps.config.maxPayloadBytes, logger) }));
}

if (require.main === module) void runServices("baseline", [startBaseline]);
