/**
 * Group commit for inserts: the documents that arrive while an insert to the same
 * collection is in flight go together in the next one — one `insert` command with
 * `ordered: false`, each document answered on its own (inserted, duplicate key, other
 * error) as if it had been inserted alone.
 *
 * Why: on the MongoDB-protocol servers this project runs on, a command's fixed cost
 * dominates a small insert. Measured on FerretDB v1.24 / PostgreSQL (2 cores), 64
 * concurrent single-document inserts cost ~830–930 µs of machine CPU per document, the
 * same documents 64 to a command ~160–190 µs (docs/decisions/0020-group-commit.md). With
 * nothing in flight the documents of one event-loop turn go on the next turn, together, so
 * an unloaded caller waits a turn; under load each waits at most for the insert ahead of
 * it, and never longer than the command deadline.
 *
 * Durability is unchanged: the command carries the caller's write concern, and no
 * document is answered before the command that wrote it has been acknowledged.
 */
import { TurnBatches } from "../../../clients/ts/src";
import {
  MongoNetworkTimeoutError,
  MongoServerError,
  ObjectId,
  type Collection,
  type Document,
  type OptionalUnlessRequiredId,
  type WriteConcernSettings,
} from "mongodb";

export interface InsertBatcherOptions<T> {
  /** Write concern of every command. */
  writeConcern: WriteConcernSettings;
  /**
   * Commands in flight at once. Default 1: the most documents per command. More splits a
   * burst into commands the server works on side by side (bench/README, "What limits the
   * two-write call").
   */
  inFlight?: number;
  /** Most documents per command. Default 256. */
  maxDocs?: number;
  /** Most estimated bytes per command (a larger document goes alone). Default 4 MiB. */
  maxBytes?: number;
  /** Estimated BSON size of a document. Default 1 KiB. */
  sizeOf?: (doc: OptionalUnlessRequiredId<T>) => number;
  /** The error each document of a command the server did not acknowledge is rejected with. */
  unacknowledged: () => Error;
  /**
   * Longest wait for a command's answer (checkout, write, reply) before its documents are
   * rejected with a MongoNetworkTimeoutError, which says retry. Default 10 s.
   */
  commandTimeoutMs?: number;
}

interface Waiting<T extends Document> {
  doc: OptionalUnlessRequiredId<T>;
  bytes: number;
  resolve: () => void;
  reject: (err: unknown) => void;
}

export class InsertBatcher<T extends Document> {
  private readonly batches: TurnBatches<Waiting<T>>;
  private readonly maxDocs: number;
  private readonly maxBytes: number;
  private readonly sizeOf: (doc: OptionalUnlessRequiredId<T>) => number;
  private readonly commandTimeoutMs: number;

  constructor(
    private readonly coll: Collection<T>,
    private readonly opts: InsertBatcherOptions<T>,
  ) {
    this.batches = new TurnBatches<Waiting<T>>(
      (queue) => this.take(queue),
      (batch) => this.send(batch),
      opts.inFlight ?? 1,
    );
    this.maxDocs = opts.maxDocs ?? 256;
    this.maxBytes = opts.maxBytes ?? 4 * 1024 * 1024;
    this.sizeOf = opts.sizeOf ?? (() => 1024);
    this.commandTimeoutMs = opts.commandTimeoutMs ?? 10_000;
  }

  /**
   * Inserts `doc` (which must carry its `_id`). Resolves once a command holding it was
   * acknowledged; rejects with that document's own error — a duplicate key is a
   * MongoServerError with code 11000, as from `insertOne` — or the command's.
   */
  insert(doc: OptionalUnlessRequiredId<T>): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.batches.push({ doc, bytes: this.sizeOf(doc), resolve, reject });
    });
  }

  /** The next command's documents: at most maxDocs and maxBytes (a larger document goes alone). */
  private take(queue: Waiting<T>[]): Waiting<T>[] {
    let bytes = 0;
    let n = 0;
    while (n < queue.length && n < this.maxDocs) {
      const next = queue[n]!.bytes;
      if (n > 0 && bytes + next > this.maxBytes) break;
      bytes += next;
      n++;
    }
    return queue.splice(0, n);
  }

  /**
   * A command unanswered after commandTimeoutMs answers its documents with a
   * MongoNetworkTimeoutError (retry: they are keyed by _id) and frees the batcher for the
   * next one. Why: MongoDB driver 7.8–7.9 can write a command to a pooled connection whose
   * socket the server's death has just destroyed (its "close" not yet emitted) and then
   * wait for "drain" forever — found as a hang after a SIGKILL (ADR 0020); one such
   * command would otherwise wedge every later insert. A batch's command also carries the
   * deadline as its abort signal, so the driver discards that connection; insertOne takes
   * no signal, so a lone document's stuck operation is abandoned (its pooled connection
   * is not reused).
   */
  private async send(batch: Waiting<T>[]): Promise<void> {
    const deadline = new AbortController();
    const timer = setTimeout(
      () => deadline.abort(new MongoNetworkTimeoutError(`insert into ${this.coll.collectionName} got no answer in ${this.commandTimeoutMs} ms`)),
      this.commandTimeoutMs,
    );
    const expired = new Promise<void>((resolve) =>
      deadline.signal.addEventListener(
        "abort",
        () => {
          for (const w of batch) w.reject(deadline.signal.reason);
          resolve();
        },
        { once: true },
      ),
    );
    try {
      await Promise.race([batch.length === 1 ? this.sendOne(batch[0]!) : this.sendMany(batch, deadline.signal), expired]);
    } finally {
      clearTimeout(timer);
    }
  }

  private async sendMany(batch: Waiting<T>[], signal: AbortSignal): Promise<void> {
    let reply: InsertReply;
    try {
      // The `insert` command itself, not insertMany: insertMany's bulk machinery wraps a
      // driver error (network, pool) in a MongoBulkWriteError that no longer says
      // "unreachable", and callers would answer INTERNAL instead of UNAVAILABLE. The price:
      // a batch's trace span is named "insert $cmd" (a single document's keeps its collection).
      reply = (await this.coll.db.command(
        {
          insert: this.coll.collectionName,
          documents: batch.map((w) => withId(w.doc)),
          ordered: false,
          writeConcern: this.opts.writeConcern,
        },
        { signal },
      )) as InsertReply;
    } catch (err) {
      for (const w of batch) w.reject(err);
      return;
    }
    if (reply.writeConcernError) {
      // Not known to be durable: every caller hears "retry" (inserts are keyed by _id).
      const wce = reply.writeConcernError;
      const retry = new MongoServerError({ message: wce.errmsg ?? "write concern error", errmsg: wce.errmsg, code: wce.code, codeName: wce.codeName });
      retry.addErrorLabel("RetryableWriteError");
      for (const w of batch) w.reject(retry);
      return;
    }
    if (typeof reply.n !== "number") {
      for (const w of batch) w.reject(this.opts.unacknowledged());
      return;
    }
    const failed = new Map((reply.writeErrors ?? []).map((e) => [e.index, e]));
    batch.forEach((w, i) => {
      const e = failed.get(i);
      if (e === undefined) w.resolve();
      else
        w.reject(
          new MongoServerError({
            message: e.errmsg ?? `write error ${e.code}`,
            errmsg: e.errmsg,
            code: e.code,
            keyPattern: e.keyPattern,
            keyValue: e.keyValue,
          }),
        );
    });
  }

  /** Alone: exactly the `insertOne` it replaces (cheaper in the driver than a bulk insert of one). */
  private async sendOne(w: Waiting<T>): Promise<void> {
    try {
      const res = await this.coll.insertOne(w.doc, { writeConcern: this.opts.writeConcern });
      if (!res.acknowledged) throw this.opts.unacknowledged();
      w.resolve();
    } catch (err) {
      w.reject(err);
    }
  }
}

/** The `insert` command's reply, as the server sends it. */
interface InsertReply {
  n?: number;
  writeErrors?: { index: number; code: number; errmsg?: string; keyPattern?: Document; keyValue?: Document }[];
  writeConcernError?: { code?: number; codeName?: string; errmsg?: string };
}

/** The document with an `_id`, as insertOne would send it (every keycap document has one already). */
function withId<D extends Document>(doc: D): D {
  return "_id" in doc ? doc : { _id: new ObjectId(), ...doc };
}
