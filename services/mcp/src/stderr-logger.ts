/**
 * The gateway's logger: JSON lines on **stderr**. Over stdio, stdout is the MCP stream to the
 * host, so not one byte of it may be a log line (hosts show the server's stderr in their logs).
 */
import pino from "pino";
import { LogDestination } from "../../common/src/log-destination";
import type { Logger, LogLevel } from "../../common/src/logger";

export function createStderrLogger(service: string, level: LogLevel): Logger {
  return pino(
    {
      level,
      base: { service, pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    // Written synchronously, every credential redacted, as every keycap log line (ADR 0024).
    new LogDestination(2),
  );
}
