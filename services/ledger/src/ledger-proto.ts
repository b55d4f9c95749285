/** The ledger's wire mapping: stored entries as the proto Entry. Nothing here decides anything. */
import type { Entry } from "../../../gen/ts/keycap/ledger/v1/ledger";
import { effectKindOf } from "../../common/src/effect-kind";
import { payloadBuffer, type DuplicateCounts, type EntryDoc } from "./entry-store";

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
