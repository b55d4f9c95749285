/**
 * One document per slot (a key, a request id), the slot as `_id`, so MongoDB's unique `_id`
 * decides which caller sends (no transaction; FerretDB has none). The HTTP gateway's forwards
 * (ADR 0019) and the MCP gateway's results (ADR 0023) both keep their record this way.
 *
 * States: `sending` (one caller holds a lease), `retryable` (the last attempt got no final
 * answer; another may send under the same slot), `done` (the final answer is stored and
 * replayed), `indeterminate` (an attempt whose outcome is unknown and which must not be sent
 * again). Every change after the insert is a compare-and-set on `attempts`, which each new
 * attempt moves on, so a caller that lost its lease cannot overwrite the attempt that took over.
 * `attempts` is set, not `$inc`'ed: FerretDB v1.24 has no atomic `$inc`; the filter on the
 * value seen is the compare-and-set.
 */
import type { Collection, Filter, MatchKeysAndValues, OptionalUnlessRequiredId } from "mongodb";
import { isDuplicateKey } from "./mongo";
import { deleteBatch } from "./retention-sweeper";

export type SlotState = "sending" | "retryable" | "done" | "indeterminate";

/** The members every slot document has; a store adds its own. */
export interface SlotDocument {
  _id: string;
  state: SlotState;
  attempts: number;
  lease_until: Date;
  created_at: Date;
  updated_at: Date;
  recorded_at?: Date;
  last_error?: string;
}

/** What a compare-and-set needs to know of the slot as it was seen. */
export interface SeenSlot {
  id: string;
  attempts: number;
  state: SlotState;
}

const MAJORITY = { writeConcern: { w: "majority" } } as const;

export class LeasedSlots<D extends SlotDocument> {
  constructor(private readonly docs: Collection<D>) {}

  async get(id: string): Promise<D | undefined> {
    return ((await this.docs.findOne(byId<D>(id))) as D | null) ?? undefined;
  }

  /** Inserts the slot as `sending` (attempt 1) with a lease; false when it exists. */
  async claimNew(id: string, fields: Omit<D, keyof SlotDocument>, leaseUntil: Date): Promise<boolean> {
    const now = new Date();
    const doc = { ...fields, _id: id, state: "sending", attempts: 1, lease_until: leaseUntil, created_at: now, updated_at: now };
    try {
      await this.docs.insertOne(doc as unknown as OptionalUnlessRequiredId<D>, MAJORITY);
      return true;
    } catch (err) {
      if (isDuplicateKey(err)) return false;
      throw err;
    }
  }

  /** Takes a retryable slot, or a sending one whose lease ran out, for attempt `seen.attempts + 1`; true when this caller won it. */
  async takeOver(seen: SeenSlot, leaseUntil: Date, also: Partial<D> = {}): Promise<boolean> {
    return this.swap(seen, { ...also, state: "sending", attempts: seen.attempts + 1, lease_until: leaseUntil });
  }

  /** Stores the final answer of `attempt`; undefined when another attempt has taken the slot since. */
  async complete(id: string, attempt: number, answer: Partial<D>): Promise<Date | undefined> {
    const recordedAt = new Date();
    const won = await this.swap({ id, attempts: attempt, state: "sending" }, { ...answer, state: "done", recorded_at: recordedAt });
    return won ? recordedAt : undefined;
  }

  /** Leaves the slot retryable after an attempt that got no final answer. */
  async release(id: string, attempt: number, error: string): Promise<void> {
    await this.swap({ id, attempts: attempt, state: "sending" }, {
      state: "retryable",
      lease_until: new Date(),
      last_error: error.slice(0, 512),
    } as Partial<D>);
  }

  /** Marks a slot whose outcome is unknown as indeterminate; true when it is (now or already). */
  async markIndeterminate(seen: SeenSlot, why: string): Promise<boolean> {
    const won = await this.swap(seen, { state: "indeterminate", last_error: why.slice(0, 512) } as Partial<D>);
    return won || seen.state === "indeterminate";
  }

  /** Removes a slot if unchanged since seen. */
  async remove(id: string, attempt: number, state: SlotState): Promise<boolean> {
    const res = await this.docs.deleteOne({ _id: id, attempts: attempt, state } as Filter<D>, MAJORITY);
    return res.deletedCount === 1;
  }

  /** Deletes up to `limit` `done` slots recorded before `before` (retention); slots in flight, retryable or indeterminate stay. */
  expireDone(before: Date, limit: number): Promise<number> {
    return deleteBatch(this.docs as unknown as Collection<SlotDocument>, { state: "done", recorded_at: { $lt: before } }, limit);
  }

  private async swap(seen: SeenSlot, set: Partial<D>): Promise<boolean> {
    const res = await this.docs.updateOne(
      { _id: seen.id, attempts: seen.attempts, state: seen.state } as Filter<D>,
      { $set: { ...set, updated_at: new Date() } as MatchKeysAndValues<D> },
      MAJORITY,
    );
    return res.modifiedCount === 1;
  }
}

function byId<D extends SlotDocument>(id: string): Filter<D> {
  return { _id: id } as Filter<D>;
}
