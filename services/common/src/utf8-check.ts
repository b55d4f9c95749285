/**
 * Ill-formed UTF-8 in a request's string fields. protobuf decoders replace each
 * bad sequence with U+FFFD, so `{"v":"\xff"}`, `{"v":"\xfe"}` and `{"v":"\ufffd"}`
 * would decode to one text, derive one key and be journaled as text the caller
 * never sent. Requests are decoded through a reader that notices the replacement;
 * the message is then marked refused (INVALID_ARGUMENT, reason INVALID_UTF8; see
 * request-refusal.ts) before any service code sees it.
 */
import { BinaryReader } from "@bufbuild/protobuf/wire";
import type { ServiceDefinition } from "@grpc/grpc-js";
import { KeycapError } from "./errors";
import { refuseRequest, requestRefusal } from "./request-refusal";
import { Reasons, refuse } from "./refuse";

// ignoreBOM: a leading U+FEFF is text the caller sent. The default drops it, which made
// run ids "\uFEFFrun-1" and "run-1" one key and hid a BOM in front of arguments_json.
const fatal = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const lenient = new TextDecoder("utf-8", { ignoreBOM: true });
/** True when the request had a string field that was not well-formed UTF-8. */
export function hadIllFormedUtf8(request: unknown): boolean {
  return requestRefusal(request)?.reason === "INVALID_UTF8";
}

function illFormedUtf8(): KeycapError {
  return refuse(Reasons.INVALID_UTF8, "a string field of the request is not well-formed UTF-8; send the text exactly, as UTF-8", {
    field: "request",
  });
}

/**
 * The service definition with each request decoded through the checking reader.
 * ts-proto's requestDeserialize hands its argument to `decode()`, which takes a
 * BinaryReader as well as bytes; a unit test holds that to be so.
 */
export function withUtf8Check(definition: ServiceDefinition): ServiceDefinition {
  const out: Record<string, ServiceDefinition[string]> = {};
  for (const [name, method] of Object.entries(definition)) {
    const decode = method.requestDeserialize as (value: Buffer | BinaryReader) => unknown;
    out[name] = {
      ...method,
      requestDeserialize: (value: Buffer) => {
        let bad = false;
        const reader = new BinaryReader(value, (bytes) => {
          try {
            return fatal.decode(bytes);
          } catch {
            bad = true;
            return lenient.decode(bytes);
          }
        });
        const message = decode(reader);
        if (bad) refuseRequest(message, illFormedUtf8());
        return message;
      },
    };
  }
  return out as ServiceDefinition;
}
