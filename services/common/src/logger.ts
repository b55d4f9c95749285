import { trace } from "@opentelemetry/api";
import pino from "pino";
import { prettyFactory } from "pino-pretty";
import { LogDestination } from "./log-destination";

/** A minimal structured logger, so the backend (pino today) stays swappable. */
export interface Logger {
  debug(fields: object, message: string): void;
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
  child(bindings: object): Logger;
}

export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";

/** `json`: one object per line; `pretty`: for people; `auto`: pretty when stdout is a terminal. */
export type LogFormat = "auto" | "json" | "pretty";
export const LOG_FORMATS: readonly LogFormat[] = ["auto", "json", "pretty"];

/**
 * Logs on stdout with `service` bound: JSON lines (what collectors and the tests read),
 * or, for a person at a terminal, pino-pretty's one line per record — written
 * synchronously, with every credential redacted (log-destination.ts). Colour only
 * on a terminal and never when NO_COLOR is set (https://no-color.org).
 */
export function createLogger(service: string, level: LogLevel = "info", format: LogFormat = "json"): Logger {
  const options: pino.LoggerOptions = {
    level,
    base: { service, pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
    mixin: traceFields,
  };
  const tty = process.stdout.isTTY === true;
  if (format === "json" || (format === "auto" && !tty)) return pino(options, new LogDestination(1));
  const noColor = (process.env["NO_COLOR"] ?? "") !== "";
  const prettify = prettyFactory({ colorize: tty && !noColor, translateTime: "SYS:HH:MM:ss.l", ignore: "pid,hostname", messageKey: "msg", singleLine: true });
  return pino(options, new LogDestination(1, prettify));
}

/**
 * The current span's trace and span id (W3C hex) on every record logged inside a traced
 * call, so a log line leads to its trace. With tracing off there is never an active span.
 */
function traceFields(): object {
  const span = trace.getActiveSpan();
  // A fresh object each time: pino merges the record's fields into what the mixin returns.
  if (!span) return {};
  const c = span.spanContext();
  return { trace_id: c.traceId, span_id: c.spanId };
}
