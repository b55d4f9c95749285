/**
 * Imported first by the CLI entry, before anything loads grpc-js or the mongodb driver:
 * OpenTelemetry's instrumentation can only wrap modules required after it starts.
 */
import { startTracing } from "../../common/src/tracing";

const target = process.argv[2] === "serve" ? (process.argv[3] ?? "all") : process.argv[2] === "mcp" ? "mcp" : "cli";
startTracing(target === "all" ? "keycap" : `keycap-${target}`);
