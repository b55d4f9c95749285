/**
 * Group commit for inserts: the documents that arrive while an insert to the same
 * collection is in flight go together in the next one — one `insert` command with
 * `ordered: false`, each document answered on its own (inserted, duplicate key, other
 * error) as if it had been inserted alone.
 *
 * Why: on the MongoDB-protocol servers this project runs on, a command's fixed cost
 * dominates a small insert. Measured on FerretDB v1.24 / PostgreSQL (2 cores), 64
 * concurrent single-document inserts cost ~830–930 µs of machine CPU per document, the
 * same documents 64 to a command ~160–190 µs (docs/decisions/0020-group-commit.md). Alone
 * (nothing in flight) a document is sent at once, so an unloaded caller waits no longer
 * than before; under load each waits at most for the insert ahead of it.
 *
 * Durability is unchanged: the command carries the caller's write concern, and no
 * document is answered before the command that wrote it has been acknowledged.
 */
import { MongoServerError, ObjectId, type Collection, type Document, type OptionalUnlessRequiredId, type WriteConcernSettings } from "mongodb";

export interface InsertBatcherOptions<T> {
  /** Write concern of every command. */
  writeConcern: WriteConcernSettings;
  /** Most documents per command. Default 256. */
  maxDocs?: number;
  /** Most estimated bytes per command (a larger document goes alone). Default 4 MiB. */
  maxBytes?: number;
  /** Estimated BSON size of a document. Default 1 KiB. */
  sizeOf?: (doc: OptionalUnlessRequiredId<T>) => number;
  /** The error each document of a command the server did not acknowledge is rejected with. */
  unacknowledged: () => Error;
}

interface Waiting<T extends Document> {
  doc: OptionalUnlessRequiredId<T>;
  bytes: number;
  resolve: () => void;
  reject: (err: unknown) => void;
}

export class InsertBatcher<T extends Document> {
  private queue: Waiting<T>[] = [];
  private inFlight = 0;
  private readonly maxDocs: number;
  private readonly maxBytes: number;
  private readonly sizeOf: (doc: OptionalUnlessRequiredId<T>) => number;

  constructor(
    private readonly coll: Collection<T>,
    private readonly opts: InsertBatcherOptions<T>,
  ) {
    this.maxDocs = opts.maxDocs ?? 256;
    this.maxBytes = opts.maxBytes ?? 4 * 1024 * 1024;
    this.sizeOf = opts.sizeOf ?? (() => 1024);
  }

  /**
   * Inserts `doc` (which must carry its `_id`). Resolves once a command holding it was
   * acknowledged; rejects with that document's own error — a duplicate key is a
   * MongoServerError with code 11000, as from `insertOne` — or the command's.
   */
  insert(doc: OptionalUnlessRequiredId<T>): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ doc, bytes: this.sizeOf(doc), resolve, reject });
      this.pump();
    });
  }

  /** Sends what is queued unless a command is out: what arrives meanwhile forms the next one. */
  private pump(): void {
    while (this.inFlight < 1 && this.queue.length > 0) {
      const batch = this.take();
      this.inFlight++;
      void this.send(batch).finally(() => {
        this.inFlight--;
        this.pump();
      });
    }
  }

  private take(): Waiting<T>[] {
    let bytes = 0;
    let n = 0;
    while (n < this.queue.length && n < this.maxDocs) {
      const next = this.queue[n]!.bytes;
      if (n > 0 && bytes + next > this.maxBytes) break;
      bytes += next;
      n++;
    }
    return this.queue.splice(0, n);
  }

  private async send(batch: Waiting<T>[]): Promise<void> {
    if (batch.length === 1) return this.sendOne(batch[0]!);
    let reply: InsertReply;
    try {
      // The `insert` command itself, not insertMany: insertMany's bulk machinery wraps a
      // driver error (network, pool) in a MongoBulkWriteError that no longer says
      // "unreachable", and callers would answer INTERNAL instead of UNAVAILABLE. The price:
      // a batch's trace span is named "insert $cmd" (a single document's keeps its collection).
      reply = (await this.coll.db.command({
        insert: this.coll.collectionName,
        documents: batch.map((w) => withId(w.doc)),
        ordered: false,
        writeConcern: this.opts.writeConcern,
      })) as InsertReply;
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
