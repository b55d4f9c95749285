/**
 * The gateway's record of each key (ADR 0019): one leased slot per key in `gateway_requests`
 * (common/src/leased-slots.ts). A key is `sending` (one forward holds a lease on it),
 * `retryable` (the last attempt failed in a way that allows another, under the same key) or
 * `done` (the destination's final answer, stored and replayed).
 */
import { Binary, type Collection, type Db } from "mongodb";
import { LeasedSlots, type SlotDocument, type SlotState } from "../../common/src/leased-slots";

/** A stored answer. */
export interface StoredResponse {
  status: number;
  headers: [string, string][];
  body: Buffer;
  bodyTruncated: boolean;
}

/** A final refusal stored for the key (a redirect off the allow-list), replayed to duplicates. */
export interface StoredRefusal {
  reason: string;
  message: string;
}

interface ForwardDoc extends SlotDocument {
  tool_id: string;
  call_id: string;
  principal: string;
  /** SHA-256 (hex) of method, URL and body: a later forward with another request is flagged. */
  request_sha256: string;
  method: string;
  url: string;
  /** Headers as documents: FerretDB (like some MongoDB-protocol servers) stores no nested arrays. */
  response?: { status: number; headers: { name: string; value: string }[]; body: Binary; body_truncated: boolean };
  refusal?: StoredRefusal;
}

/** A key's record as the gateway reads it. */
export interface ForwardRecord {
  key: string;
  state: SlotState;
  attempts: number;
  leaseUntil: Date;
  requestSha256: string;
  response?: StoredResponse;
  refusal?: StoredRefusal;
  recordedAt?: Date;
}

/** What is known of a forward when it claims its key. */
export interface ForwardClaim {
  key: string;
  toolId: string;
  callId: string;
  principal: string;
  requestSha256: string;
  method: string;
  url: string;
}

export class ForwardStore {
  private constructor(private readonly slots: LeasedSlots<ForwardDoc>) {}

  static async open(db: Db): Promise<ForwardStore> {
    const docs = db.collection<ForwardDoc>("gateway_requests");
    await docs.createIndex({ tool_id: 1, created_at: -1 });
    await docs.createIndex({ state: 1 });
    await docs.createIndex({ state: 1, recorded_at: 1 }, { name: "state_recorded_at" });
    return new ForwardStore(new LeasedSlots(docs));
  }

  /**
   * Retention (ADR 0031): deletes up to `limit` stored answers recorded before `before`; the next
   * forward of such a key is sent again, under the same Idempotency-Key (whether the destination
   * still remembers it is up to the destination). Keys in flight or retryable stay.
   */
  expire(before: Date, limit: number): Promise<number> {
    return this.slots.expireDone(before, limit);
  }

  async get(key: string): Promise<ForwardRecord | undefined> {
    const doc = await this.slots.get(key);
    return doc ? recordOf(doc) : undefined;
  }

  /** Inserts the key as `sending` (attempt 1) with a lease; false when the key exists. */
  claimNew(claim: ForwardClaim, leaseUntil: Date): Promise<boolean> {
    const { key, toolId, callId, principal, requestSha256, method, url } = claim;
    return this.slots.claimNew(key, { tool_id: toolId, call_id: callId, principal, request_sha256: requestSha256, method, url }, leaseUntil);
  }

  /**
   * Takes a retryable key, or a sending key whose lease has run out (its forward crashed or
   * hung), for a new attempt: true when this caller won it.
   */
  takeOver(seen: ForwardRecord, leaseUntil: Date): Promise<boolean> {
    return this.slots.takeOver({ id: seen.key, attempts: seen.attempts, state: seen.state }, leaseUntil);
  }

  /** Stores the final answer of `attempt`; undefined when another attempt has taken the key since. */
  complete(key: string, attempt: number, outcome: { response: StoredResponse } | { refusal: StoredRefusal }): Promise<Date | undefined> {
    const answer: Partial<ForwardDoc> =
      "response" in outcome
        ? {
            response: {
              status: outcome.response.status,
              headers: outcome.response.headers.map(([name, value]) => ({ name, value })),
              body: new Binary(outcome.response.body),
              body_truncated: outcome.response.bodyTruncated,
            },
          }
        : { refusal: outcome.refusal };
    return this.slots.complete(key, attempt, answer);
  }

  /** Leaves the key retryable after a failed attempt (nothing final came back). */
  release(key: string, attempt: number, error: string): Promise<void> {
    return this.slots.release(key, attempt, error);
  }
}

function recordOf(doc: ForwardDoc): ForwardRecord {
  return {
    key: doc._id,
    state: doc.state,
    attempts: doc.attempts,
    leaseUntil: doc.lease_until,
    requestSha256: doc.request_sha256,
    ...(doc.response
      ? {
          response: {
            status: doc.response.status,
            headers: doc.response.headers.map((h): [string, string] => [h.name, h.value]),
            body: Buffer.from(doc.response.body.buffer),
            bodyTruncated: doc.response.body_truncated,
          },
        }
      : {}),
    ...(doc.refusal ? { refusal: doc.refusal } : {}),
    ...(doc.recorded_at ? { recordedAt: doc.recorded_at } : {}),
  };
}
