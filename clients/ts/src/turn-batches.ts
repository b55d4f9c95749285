/**
 * A queue drained in batches, one batch in flight: what arrives in one turn of the event
 * loop goes together on the next turn (a Promise.all's items share a batch), and what
 * arrives while a batch is out forms the next one. Used by the client's call coalescer and
 * by the services' insert batcher (group commit, ADR 0020/0022).
 */
export class TurnBatches<W> {
  private queue: W[] = [];
  private inFlight = false;
  private scheduled = false;

  constructor(
    /** Removes the next batch from the front of the (non-empty) queue and returns it. */
    private readonly take: (queue: W[]) => W[],
    /** Sends one batch; the next waits until it settles. Must answer each item itself. */
    private readonly send: (batch: W[]) => Promise<void>,
  ) {}

  push(item: W): void {
    this.queue.push(item);
    if (this.scheduled || this.inFlight) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.pump();
    });
  }

  private pump(): void {
    if (this.inFlight || this.queue.length === 0) return;
    const batch = this.take(this.queue);
    this.inFlight = true;
    void this.send(batch).finally(() => {
      this.inFlight = false;
      this.pump();
    });
  }
}
