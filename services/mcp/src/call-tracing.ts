/**
 * A trace through the gateway (ADR 0017's tracing, on when OTEL_TRACES_EXPORTER is set): one
 * server span per host tools/call, its parent the W3C trace context the host put in the
 * request's `_meta` (`traceparent`, `tracestate`), if any. The kernel calls inside it are its
 * children (the gRPC instrumentation), and the context goes on to the upstream in the
 * forwarded request's `_meta`, so one trace runs host → gateway → kernel → upstream.
 */
import { context, propagation, SpanKind, SpanStatusCode, trace, type Span, type TextMapGetter } from "@opentelemetry/api";

const tracer = trace.getTracer("keycap-mcp");

const META_GETTER: TextMapGetter<Record<string, unknown>> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => {
    const v = carrier[key];
    return typeof v === "string" ? v : undefined;
  },
};

/** Runs `fn` inside a server span for one tools/call, continuing the host's trace from `_meta`. */
export function traceCall<T>(toolId: string, toolName: string, meta: Record<string, unknown> | undefined, fn: (span: Span) => Promise<T>): Promise<T> {
  const parent = meta ? propagation.extract(context.active(), meta, META_GETTER) : context.active();
  return tracer.startActiveSpan(
    "mcp tools/call",
    { kind: SpanKind.SERVER, attributes: { "keycap.tool_id": toolId, "mcp.tool.name": toolName } },
    parent,
    async (span) => {
      try {
        return await fn(span);
      } catch (err) {
        span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
        throw err;
      } finally {
        span.end();
      }
    },
  );
}

/** The current trace context as `_meta` entries for the upstream (`traceparent`, `tracestate`); none when not tracing. */
export function traceMeta(): Record<string, string> {
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  return carrier;
}
