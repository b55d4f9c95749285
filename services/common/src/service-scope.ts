/**
 * The lifecycle every service's start shares: what it opens (database, stores, key sources,
 * timers, listeners) is registered as it is opened, and closed in the reverse order on stop,
 * or at once when a later step of the start fails, so a failed start leaves nothing open.
 */
import { startListener, type ListenerOptions, type RunningListener } from "./grpc-server";
import type { RunningService } from "./service-runner";

type Closer = (graceMs: number) => Promise<void> | void;

export class ServiceScope {
  private readonly closers: Closer[] = [];
  private readonly started: RunningListener[] = [];

  /** Registers how to close `value` (just opened), and returns it. */
  own<T>(value: T, close: (value: T, graceMs: number) => Promise<void> | void): T {
    this.closers.push((graceMs) => close(value, graceMs));
    return value;
  }

  /** Registers something to do at stop, before what was opened earlier is closed. */
  onStop(fn: Closer): void {
    this.closers.push(fn);
  }

  /**
   * Starts a gRPC listener. The service's listeners drain together at stop (each for up to
   * the grace period, not one after another), before anything opened before them closes.
   */
  async listen(options: ListenerOptions): Promise<RunningListener> {
    if (this.started.length === 0) this.closers.push((graceMs) => Promise.all(this.started.map((l) => l.shutdown(graceMs))).then(() => undefined));
    const listener = await startListener(options);
    this.started.push(listener);
    return listener;
  }

  get listeners(): RunningListener[] {
    return [...this.started];
  }

  /** Closes everything registered, last first. */
  async close(graceMs: number): Promise<void> {
    for (const close of this.closers.splice(0).reverse()) await close(graceMs);
  }
}

/**
 * Runs a service's start in a fresh scope: on success the service stops by closing the scope;
 * on failure the scope is closed at once and the error rethrown.
 */
export async function startScoped(name: string, start: (scope: ServiceScope) => Promise<Pick<RunningService, "reload"> | void>): Promise<RunningService> {
  const scope = new ServiceScope();
  try {
    const extra = (await start(scope)) ?? {};
    return { name, listeners: scope.listeners, ...extra, stop: (graceMs) => scope.close(graceMs) };
  } catch (err) {
    await scope.close(0).catch(() => undefined);
    throw err;
  }
}
