/**
 * Client-side group commit for BeginCall and CompleteCall (docs/decisions/0022) and the
 * ledger's Write (0037): the calls a client makes while one of its requests of the same kind
 * is in flight go together in the next one, as a BeginCalls / CompleteCalls / Writes batch,
 * each answered on its own exactly as the unary RPC would have answered it.
 *
 * Why: at load the whole call's cost is per message, not per byte — each RPC is HTTP/2
 * frames, a socket write and a wake-up in the client and in the kernel, and an
 * authentication (bench/README.md). With nothing in flight a call is sent on the next turn
 * of the event loop, with the calls that turn made (alone: as the unary RPC), so an
 * unloaded caller waits no longer than before; under load each waits at most for the
 * request ahead of it.
 */
import { Metadata, status } from "@grpc/grpc-js";
import { Status } from "../gen/google/rpc/status";
import { KeycapClientError } from "./errors";
import { TurnBatches } from "./turn-batches";

/** One item's answer in a batch: the unary response, or the encoded google.rpc.Status of its error. */
export type BatchAnswer<Res> = { ok: true; value: Res } | { ok: false; status: Uint8Array };

interface Waiting<Item, Res> {
  item: Item;
  resolve: (r: Res) => void;
  reject: (e: unknown) => void;
}

/** Most calls per batch: the limit the kernel's proto states (repeated.max_items). */
export const MAX_BATCH_CALLS = 256;

export interface CoalescerOptions {
  /** Most calls per batch (at most MAX_BATCH_CALLS). Default MAX_BATCH_CALLS. */
  maxBatch?: number;
  /** Batches in flight at once. Default 1. */
  inFlight?: number;
}

/**
 * The batches the clients send (begins, completes, writes): two of 32 calls at most in flight,
 * so a burst of concurrent calls (a closed loop of 64 moves in lockstep) reaches the service as
 * two requests it works on side by side, and the next burst need not wait behind one
 * (bench/README, "What limits the two-write call").
 */
export const CALL_BATCHES: CoalescerOptions = { maxBatch: 32, inFlight: 2 };

export class CallCoalescer<Item, Res> {
  private readonly batches: TurnBatches<Waiting<Item, Res>>;
  /** Set once a kernel answered UNIMPLEMENTED to the batch RPC (older than ADR 0022): unary from then on. */
  private batchUnsupported = false;

  constructor(
    /** The unary RPC for one item, with the client's retries and default deadline. */
    private readonly sendOne: (item: Item) => Promise<Res>,
    /** The batch RPC; answers[i] answers items[i]. */
    private readonly sendBatch: (items: Item[]) => Promise<BatchAnswer<Res>[]>,
    opts: CoalescerOptions = {},
  ) {
    const most = Math.min(opts.maxBatch ?? MAX_BATCH_CALLS, MAX_BATCH_CALLS);
    this.batches = new TurnBatches(
      (queue) => queue.splice(0, most),
      (batch) => this.send(batch),
      opts.inFlight ?? 1,
    );
  }

  /** Sends `item` now, or with the next batch when as many as may be are in flight; settles with its own answer. */
  submit(item: Item): Promise<Res> {
    if (this.batchUnsupported) return this.sendOne(item);
    return new Promise<Res>((resolve, reject) => {
      this.batches.push({ item, resolve, reject });
    });
  }

  private async send(batch: Waiting<Item, Res>[]): Promise<void> {
    if (batch.length === 1 || this.batchUnsupported) return this.alone(batch);
    let answers: BatchAnswer<Res>[];
    try {
      answers = await this.sendBatch(batch.map((w) => w.item));
      if (answers.length !== batch.length)
        throw new KeycapClientError(status.INTERNAL, "BATCH_ANSWER_MISMATCH", `the server answered ${answers.length} results for ${batch.length} calls`, {});
    } catch (err) {
      const e = KeycapClientError.from(err);
      if (e.code === status.UNIMPLEMENTED) {
        this.batchUnsupported = true;
        return this.alone(batch);
      }
      // Refused as a whole for something in its bytes (an item the decoding refused) or its
      // size (a server with a smaller message limit): each call alone gets its own answer.
      if (e.code === status.INVALID_ARGUMENT || e.code === status.RESOURCE_EXHAUSTED) return this.alone(batch);
      for (const w of batch) w.reject(e);
      return;
    }
    const retries: Waiting<Item, Res>[] = [];
    batch.forEach((w, i) => {
      const a = answers[i]!;
      if (a.ok) return w.resolve(a.value);
      const e = errorOf(a.status);
      // "Retry" for this call alone (the database was briefly away): the unary RPC retries it
      // with backoff, as it would have been retried had it been sent alone.
      if (e.code === status.UNAVAILABLE) retries.push(w);
      else w.reject(e);
    });
    if (retries.length > 0) await this.alone(retries);
  }

  private async alone(batch: Waiting<Item, Res>[]): Promise<void> {
    await Promise.all(batch.map((w) => this.sendOne(w.item).then(w.resolve, w.reject)));
  }
}

/** A batch item's error as the KeycapClientError the unary RPC would have thrown. */
export function errorOf(encoded: Uint8Array): KeycapClientError {
  let st: Status;
  try {
    st = Status.decode(encoded);
  } catch {
    return new KeycapClientError(status.UNKNOWN, "UNKNOWN", "a batch item's error status did not decode", {});
  }
  const metadata = new Metadata();
  metadata.set("grpc-status-details-bin", Buffer.from(encoded));
  return KeycapClientError.from({ code: st.code, details: st.message, metadata });
}

/** A batch result as the coalescer's answer; a result with neither case set is a defect of `server`. */
export function batchAnswer<Res>(value: Res | undefined, errorStatus: Uint8Array | undefined, server: string): BatchAnswer<Res> {
  if (value !== undefined) return { ok: true, value };
  if (errorStatus !== undefined) return { ok: false, status: errorStatus };
  throw new KeycapClientError(status.INTERNAL, "BATCH_ANSWER_EMPTY", `${server} answered a batch item with neither a result nor an error`, {});
}
