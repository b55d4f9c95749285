/** The ledger's wire mapping: stored entries as the proto Entry. Nothing here decides anything. */
import type { Entry } from "../../../gen/ts/keycap/ledger/v1/ledger";
import type { EntryWrite } from "../../../gen/ts/keycap/ledger/v1/ledger_admin";
import { effectKindOf } from "../../common/src/effect-kind";
import { payloadBuffer, PREVIEW_BYTES, type DuplicateCounts, type DuplicateDoc, type EntryDoc } from "./entry-store";

/**
 * A stored entry as the API returns it. Counts come from the admin API, which
 * counts the duplicate records; a Write response leaves them 0 (see ledger.proto).
 */
export function entryToProto(doc: EntryDoc, counts: DuplicateCounts = { duplicates: 0, payloadMismatches: 0 }): Entry {
  return {
    entryId: doc.entry_id,
    toolId: doc.tool_id,
    effectKind: effectKindOf(doc.effect),
    callId: doc.call_id,
    attempt: doc.attempt,
    capabilityId: doc.capability_id,
    key: doc.key,
    requestId: doc.request_id,
    payload: payloadBuffer(doc.payload),
    payloadSha256: doc.payload_sha256,
    recordedAt: doc.recorded_at,
    duplicateCount: counts.duplicates,
    payloadMismatch: doc.payload_mismatch,
    payloadMismatchCount: counts.payloadMismatches,
    principal: doc.principal ?? "",
  };
}

/** The writes GetEntry lists: the first (from the entry itself), then the mismatching ones, oldest first. */
export function entryWritesToProto(doc: EntryDoc, mismatching: readonly DuplicateDoc[]): EntryWrite[] {
  const payload = payloadBuffer(doc.payload);
  const first: EntryWrite = {
    first: true,
    payloadMismatch: false,
    payloadSha256: doc.payload_sha256,
    payloadSize: payload.length,
    payloadPreview: Buffer.from(payload.subarray(0, PREVIEW_BYTES)),
    callId: doc.call_id,
    attempt: doc.attempt,
    capabilityId: doc.capability_id,
    at: doc.recorded_at,
  };
  return [
    first,
    ...mismatching.map((d) => ({
      first: false,
      payloadMismatch: d.payload_mismatch,
      payloadSha256: d.payload_sha256,
      payloadSize: d.payload_size ?? 0,
      payloadPreview: d.payload_preview ? payloadBuffer(d.payload_preview) : Buffer.alloc(0),
      callId: d.call_id,
      attempt: d.attempt,
      capabilityId: d.capability_id,
      at: d.at,
    })),
  ];
}
