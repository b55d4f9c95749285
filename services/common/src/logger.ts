import pino from "pino";

/** A minimal structured logger, so the backend (pino today) stays swappable. */
export interface Logger {
  debug(fields: object, message: string): void;
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
  child(bindings: object): Logger;
}

export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";

/** JSON lines on stdout (one object per line), with `service` bound. */
export function createLogger(service: string, level: LogLevel = "info"): Logger {
  return pino({
    level,
    base: { service, pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  });
}
