/**
 * keycap.bench.v1.BaselineService: the benchmarks' baseline (bench/README.md). The same
 * insert as an idempotent ledger Write (same `entries` collection, same document shape,
 * same `idem:<key>` `_id` under the same unique index, same duplicate handling), with a
 * key the client chooses and no capability, no verification, no audit. What a user would
 * write instead of keycap; the enforced Write is measured against it.
 *
 * Registered on the ledger listener only when KEYCAP_BENCH_BASELINE=1; never enable it in
 * a deployment: it writes without any authorisation.
 */
import { createHash } from "node:crypto";
import { status, type ServerUnaryCall } from "@grpc/grpc-js";
import { BaselineServiceService, type BaselineServiceServer, type WriteRequest, type WriteResponse } from "../../../gen/ts/keycap/bench/v1/baseline";
import { KeycapError } from "../../common/src/errors";
import type { ServiceBinding } from "../../common/src/grpc-server";
import { unaryHandler } from "../../common/src/grpc-status";
import type { Logger } from "../../common/src/logger";
import { idempotentEffectId } from "./domain/write-rule";
import type { EntryDoc, EntryStore } from "./entry-store";
import { entryToProto, newEntryId } from "./ledger-service";

/** Fully-qualified name of the baseline service. */
export const BENCH_BASELINE_SERVICE_NAME = "keycap.bench.v1.BaselineService";

/** The environment variable that turns the baseline on ("1"). */
export const BENCH_BASELINE_ENV = "KEYCAP_BENCH_BASELINE";

/** Tool id recorded on baseline entries, so they are never mistaken for a tool's. */
export const BASELINE_TOOL_ID = "keycap.bench.baseline";

/** True when the environment asks for the baseline service. */
export function benchBaselineEnabled(env: NodeJS.ProcessEnv = process.env): boolean {
  return env[BENCH_BASELINE_ENV] === "1";
}

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
      call_id: "",
      attempt: 1,
      capability_id: "",
      key: req.key,
      request_id: "",
      payload: req.payload,
      payload_sha256: payloadSha256,
      recorded_at: new Date(),
      payload_mismatch: false,
    };
    if (await this.entries.insert(doc)) return { entry: entryToProto(doc), duplicate: false, payloadMismatch: false };
    // What a user would write instead: on the collision, read the original back.
    const original = await this.entries.findByEffectId(effectId);
    if (!original) throw new KeycapError(status.INTERNAL, "INTERNAL", "entry collided but cannot be found");
    return { entry: entryToProto(original), duplicate: true, payloadMismatch: original.payload_sha256 !== payloadSha256 };
  }
}

/** The baseline as a binding for the ledger listener. */
export function benchBaselineBinding(entries: EntryStore, maxPayloadBytes: number, logger: Logger): ServiceBinding {
  const writer = new BaselineWriter(entries, maxPayloadBytes);
  const implementation: BaselineServiceServer = {
    write: unaryHandler(logger, "BaselineWrite", (req: WriteRequest, _call: ServerUnaryCall<WriteRequest, WriteResponse>) => writer.write(req)),
  };
  return { name: BENCH_BASELINE_SERVICE_NAME, definition: BaselineServiceService, implementation };
}
