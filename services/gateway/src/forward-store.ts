/**
 * The gateway's record of each key (ADR 0019): one document per key in `gateway_requests`,
 * the key as `_id`, so MongoDB's unique `_id` decides which forward sends. A document is
 * `sending` (one forward holds a lease on it), `retryable` (the last attempt failed in a way
 * that allows another, under the same key) or `done` (the destination's final answer,
 * stored and replayed). Every change after the insert is a compare-and-set on `attempts`,
 * which each new attempt increments: a forward that lost its lease cannot overwrite the
 * attempt that took over.
 */
import { Binary, type Collection, type Db } from "mongodb";
import { isDuplicateKey } from "../../common/src/mongo";

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

interface ForwardDoc {
  _id: string;
  tool_id: string;
  call_id: string;
  principal: string;
  /** SHA-256 (hex) of method, URL and body: a later forward with another request is flagged. */
  request_sha256: string;
  method: string;
  url: string;
  state: "sending" | "retryable" | "done";
  attempts: number;
  lease_until: Date;
  created_at: Date;
  updated_at: Date;
  last_error?: string;
  /** Headers as documents: FerretDB (like some MongoDB-protocol servers) stores no nested arrays. */
  response?: { status: number; headers: { name: string; value: string }[]; body: Binary; body_truncated: boolean };
  refusal?: StoredRefusal;
  recorded_at?: Date;
}

/** A key's record as the gateway reads it. */
export interface ForwardRecord {
  key: string;
  state: ForwardDoc["state"];
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
  private constructor(private readonly docs: Collection<ForwardDoc>) {}

  static async open(db: Db): Promise<ForwardStore> {
    const docs = db.collection<ForwardDoc>("gateway_requests");
    await docs.createIndex({ tool_id: 1, created_at: -1 });
    await docs.createIndex({ state: 1 });
    return new ForwardStore(docs);
  }

  async get(key: string): Promise<ForwardRecord | undefined> {
    const doc = await this.docs.findOne({ _id: key });
    return doc ? recordOf(doc) : undefined;
  }

  /** Inserts the key as `sending` (attempt 1) with a lease; false when the key exists. */
  async claimNew(claim: ForwardClaim, leaseUntil: Date): Promise<boolean> {
    const now = new Date();
    try {
      await this.docs.insertOne(
        {
          _id: claim.key,
          tool_id: claim.toolId,
          call_id: claim.callId,
          principal: claim.principal,
          request_sha256: claim.requestSha256,
          method: claim.method,
          url: claim.url,
          state: "sending",
          attempts: 1,
          lease_until: leaseUntil,
          created_at: now,
          updated_at: now,
        },
        { writeConcern: { w: "majority" } },
      );
      return true;
    } catch (err) {
      if (isDuplicateKey(err)) return false;
      throw err;
    }
  }

  /**
   * Takes a retryable key, or a sending key whose lease has run out (its forward crashed or
   * hung), for a new attempt: true when this caller won it.
   */
  async takeOver(seen: ForwardRecord, leaseUntil: Date): Promise<boolean> {
    const res = await this.docs.updateOne(
      { _id: seen.key, attempts: seen.attempts, state: seen.state },
      { $set: { state: "sending", lease_until: leaseUntil, updated_at: new Date() }, $inc: { attempts: 1 } },
      { writeConcern: { w: "majority" } },
    );
    return res.modifiedCount === 1;
  }

  /** Stores the final answer of `attempt`; false when another attempt has taken the key since. */
  async complete(key: string, attempt: number, outcome: { response: StoredResponse } | { refusal: StoredRefusal }): Promise<Date | undefined> {
    const recordedAt = new Date();
    const set =
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
    const res = await this.docs.updateOne(
      { _id: key, attempts: attempt, state: "sending" },
      { $set: { state: "done", recorded_at: recordedAt, updated_at: recordedAt, ...set } },
      { writeConcern: { w: "majority" } },
    );
    return res.modifiedCount === 1 ? recordedAt : undefined;
  }

  /** Leaves the key retryable after a failed attempt (nothing final came back). */
  async release(key: string, attempt: number, error: string): Promise<void> {
    await this.docs.updateOne(
      { _id: key, attempts: attempt, state: "sending" },
      { $set: { state: "retryable", lease_until: new Date(), last_error: error.slice(0, 512), updated_at: new Date() } },
      { writeConcern: { w: "majority" } },
    );
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
