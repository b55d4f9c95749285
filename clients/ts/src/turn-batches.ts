/**
 * A queue drained in batches, `inFlight` batches out at most (one by default): what arrives
 * in one turn of the event loop goes together on the next turn (a Promise.all's items share
 * a batch), and what arrives while as many batches are out forms the next one. Used by the client's call coalescer and
 * by the services' insert batcher (group commit, ADR 0020/0022).
 */
export class TurnBatches<W> {
  private queue: W[] = [];
  private out = 0;
  private scheduled = false;

  constructor(
    /** Removes the next batch from the front of the (non-empty) queue and returns it. */
    private readonly take: (queue: W[]) => W[],
    /** Sends one batch; the next waits until one out settles. Must answer each item itself. */
    private readonly send: (batch: W[]) => Promise<void>,
    /** Batches out at once. */
    private readonly inFlight = 1,
  ) {}

  push(item: W): void {
    this.queue.push(item);
    if (this.scheduled || this.out >= this.inFlight) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.pump();
    });
  }

  private pump(): void {
    while (this.out < this.inFlight && this.queue.length > 0) {
      const batch = this.take(this.queue);
      this.out++;
      void this.send(batch).finally(() => {
        this.out--;
        this.pump();
      });
    }
  }
}
