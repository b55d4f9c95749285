/**
 * The gateway's logger: JSON lines on **stderr**. Over stdio, stdout is the MCP stream to the
 * host, so not one byte of it may be a log line (hosts show the server's stderr in their logs).
 */
import pino from "pino";
import type { Logger, LogLevel } from "../../common/src/logger";

export function createStderrLogger(service: string, level: LogLevel): Logger {
  return pino(
    {
      level,
      base: { service, pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    pino.destination({ fd: 2, sync: true }),
  );
}
