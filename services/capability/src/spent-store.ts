/**
 * Single use of unsafe and queryable capabilities at a sink (ADR 0013 §6): the sink spends
 * a capability's `jti` before its handler runs; the store's answer decides, so two
 * presentations racing each other cannot both run the effect.
 */
import type { Collection, Db } from "mongodb";
import { KeycapError } from "../../common/src/errors";
import { isDatabaseUnavailable, isDuplicateKey } from "../../common/src/mongo";
import { Reasons, refuse } from "../../common/src/refuse";
import type { Logger } from "../../common/src/logger";
import { deleteBatch, RetentionSweeper } from "../../common/src/retention-sweeper";

const SILENT: Logger = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {}, child: () => SILENT };

/** One capability being spent. */
export interface SpentCapability {
  sink: string;
  jti: string;
  toolId: string;
  callId: string;
  effect: string;
  /** After this the capability is refused as expired anyway, so its record may go. */
  expiresAt: Date;
}

/** Where a sink remembers spent capabilities. */
export interface SpentStore {
  /**
   * @returns true the first time a capability is spent, false every later time.
   * @throws KeycapError UNAVAILABLE / DATABASE_UNAVAILABLE when the store cannot tell.
   */
  spend(c: SpentCapability): Promise<boolean>;
  close(): Promise<void>;
}

/** One process's memory: for tests and single-replica sinks. */
export class InMemorySpentStore implements SpentStore {
  private readonly spent = new Map<string, number>();

  constructor(private readonly now: () => number = Date.now) {}

  spend(c: SpentCapability): Promise<boolean> {
    const t = this.now();
    // Forgetting expired ids on the way keeps the map bounded by live capabilities.
    if (this.spent.size > 1024) for (const [id, exp] of this.spent) if (exp < t) this.spent.delete(id);
    const id = `${c.sink}/${c.jti}`;
    if (this.spent.has(id)) return Promise.resolve(false);
    this.spent.set(id, c.expiresAt.getTime());
    return Promise.resolve(true);
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

/** A stored spent capability (collection `spent_capabilities`). */
export interface SpentDoc {
  /** `<sink>/<jti>`: the insert of this id is what decides first use. */
  _id: string;
  sink: string;
  jti: string;
  tool_id: string;
  call_id: string;
  effect: string;
  spent_at: Date;
  expires_at: Date;
}

/** Options of {@link MongoSpentStore.open}. */
export interface MongoSpentStoreOptions {
  /** How often expired records are deleted, in milliseconds; 0 never. Default 60,000. */
  sweepIntervalMs?: number;
  /** Most records one delete removes. Default 1,000. */
  sweepBatch?: number;
  /** Kept this much past their expiry, for a sweeping replica whose clock runs ahead (s). Default 5. */
  clockSkewSeconds?: number;
  /** Told what each sweep removed (debug) and why one failed (warn). Default: silent. */
  logger?: Logger;
  now?: () => number;
}

/**
 * Spent capabilities in MongoDB, shared by every replica of a sink. FerretDB has no TTL
 * indexes: expired records are swept in bounded batches by one replica at a time (ADR 0031).
 */
export class MongoSpentStore implements SpentStore {
  private readonly now: () => number;
  private sweeper: RetentionSweeper | undefined;

  private constructor(
    private readonly coll: Collection<SpentDoc>,
    private readonly opts: MongoSpentStoreOptions,
  ) {
    this.now = opts.now ?? Date.now;
  }

  /** Opens the collection and its sweep index, and starts sweeping. */
  static async open(db: Db, opts: MongoSpentStoreOptions = {}): Promise<MongoSpentStore> {
    const coll = db.collection<SpentDoc>("spent_capabilities");
    await coll.createIndex({ expires_at: 1 }, { name: "expires_at" });
    const store = new MongoSpentStore(coll, opts);
    const intervalMs = opts.sweepIntervalMs ?? 60_000;
    const batch = opts.sweepBatch ?? 1000;
    const task = { name: "sink_spent_capabilities", sweep: (limit: number) => store.sweep(limit) };
    const logger = opts.logger ?? SILENT;
    store.sweeper = (await RetentionSweeper.open(db, [task], { intervalMs, batch, service: "sink", logger, ...(opts.now ? { now: opts.now } : {}) })).start();
    return store;
  }

  async spend(c: SpentCapability): Promise<boolean> {
    try {
      const res = await this.coll.insertOne({
        _id: `${c.sink}/${c.jti}`,
        sink: c.sink,
        jti: c.jti,
        tool_id: c.toolId,
        call_id: c.callId,
        effect: c.effect,
        spent_at: new Date(this.now()),
        expires_at: c.expiresAt,
      });
      if (!res.acknowledged) throw unavailable("the spent-capability insert was not acknowledged");
      return true;
    } catch (err) {
      if (isDuplicateKey(err)) return false;
      if (err instanceof KeycapError) throw err;
      // Any other failure leaves first use undecided: refuse, retryably, and run nothing.
      const e = unavailable(isDatabaseUnavailable(err) ? "the spent-capability store is unreachable; retry" : "the spent-capability store failed; retry");
      (e as { cause?: unknown }).cause = err;
      throw e;
    }
  }

  /**
   * Deletes up to `limit` records of capabilities past their expiry (plus the clock skew); returns
   * how many. The sweeper calls it; a replay of such a capability is refused as expired anyway.
   */
  sweep(limit = 1000): Promise<number> {
    const before = new Date(this.now() - (this.opts.clockSkewSeconds ?? 5) * 1000);
    return deleteBatch(this.coll, { expires_at: { $lt: before } }, limit);
  }

  async close(): Promise<void> {
    await this.sweeper?.stop();
  }
}

function unavailable(message: string): KeycapError {
  return refuse(Reasons.DATABASE_UNAVAILABLE, message);
}
