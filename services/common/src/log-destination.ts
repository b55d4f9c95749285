import * as fs from "node:fs";
import { redactSecrets } from "./secret-redaction";

/** How long one line may wait for a full pipe before it is dropped. */
const FULL_PIPE_PATIENCE_MS = 2_000;
const FULL_PIPE_PAUSE_MS = 10;

/**
 * Where log lines go: synchronously to a file descriptor (stdout), so a line is out before
 * a crash or exit that follows it, with credentials redacted on the way.
 *
 * Written here rather than left to pino's sonic-boom because of how a log writer must fail:
 * when the reader of stdout has gone (EPIPE), sonic-boom 4.2's synchronous flush sleeps
 * 100 ms and retries for ever, and a service told to stop never exits. Here a closed
 * stdout ends logging and nothing else; a full pipe is waited on for a bounded time, then
 * the line is dropped and counted, so logging can slow a service but never hang it.
 */
export class LogDestination {
  private closed = false;
  /** Lines not written because the pipe stayed full or was closed. */
  dropped = 0;

  constructor(
    private readonly fd: number,
    private readonly format: (line: string) => string = (line) => line,
  ) {}

  /** pino calls this with one serialized record (a JSON line). */
  write(line: string): boolean {
    if (this.closed) {
      this.dropped++;
      return true;
    }
    let bytes = Buffer.from(this.format(redactSecrets(line)), "utf8");
    const giveUpAt = Date.now() + FULL_PIPE_PATIENCE_MS;
    while (bytes.length > 0) {
      try {
        const n = fs.writeSync(this.fd, bytes);
        bytes = bytes.subarray(n);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if ((code === "EAGAIN" || code === "EBUSY") && Date.now() < giveUpAt) {
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, FULL_PIPE_PAUSE_MS);
          continue;
        }
        // EPIPE, EBADF and the rest: nobody can read what we write any more.
        if (code !== "EAGAIN" && code !== "EBUSY") this.closed = true;
        this.dropped++;
        return true;
      }
    }
    return true;
  }
}
