/**
 * A call as the journal stores it (ADR 0036): the record with its capability's claims as one
 * JSON string. FerretDB converts every value of a document on each insert, and the claims are
 * half a journal document's values (a third of its database CPU on FerretDB/PostgreSQL) while
 * no read ever filters on them; the fields reads filter on stay top-level.
 */
import type { CapabilityClaims } from "../../capability/src";
import type { CallRecord } from "./call-record";

/**
 * A journal document (`calls`, `pending_calls`). `capability` is read only from documents
 * written before ADR 0036; a kernel of this version writes `capability_json`.
 */
export type StoredCall = Omit<CallRecord, "capability"> & { capability_json?: string; capability?: CapabilityClaims };

/** The document the journal stores for a call. */
export function toStored(call: CallRecord): StoredCall {
  const { capability, ...rest } = call;
  return { ...rest, capability_json: JSON.stringify(capability) };
}

/** The call a journal document holds, from either form. */
export function fromStored(doc: StoredCall): CallRecord {
  const { capability_json, capability, ...rest } = doc;
  if (capability_json === undefined) {
    if (capability === undefined) throw new Error(`journal document ${doc._id} holds no capability claims`);
    return { ...rest, capability };
  }
  return { ...rest, capability: parseClaims(doc._id, capability_json) };
}

/** A found document's call, or undefined (the driver's null for none). */
export function callOf(doc: StoredCall | null | undefined): CallRecord | undefined {
  return doc ? fromStored(doc) : undefined;
}

function parseClaims(callId: string, json: string): CapabilityClaims {
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch {
    throw new Error(`journal document ${callId}: capability_json is not JSON`);
  }
  // Not checked claim by claim: the minter checked them before they were journaled, as it did
  // when they were an object (one damaged document must not fail a whole listing over a claim).
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new Error(`journal document ${callId}: capability_json is not an object`);
  return value as CapabilityClaims;
}
