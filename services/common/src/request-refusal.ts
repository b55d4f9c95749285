/**
 * A request refused while it was decoded (ill-formed UTF-8, a broken proto rule):
 * the decoding wrappers mark the decoded message, and the shared unary handler
 * answers the mark before any service code sees the request. One mark per
 * request: the first decoder to refuse wins.
 */
import type { KeycapError } from "./errors";

const refused = new WeakMap<object, KeycapError>();

/** Marks `request` as refused with `err`, unless an earlier decoder refused it already. */
export function refuseRequest(request: unknown, err: KeycapError): void {
  if (typeof request === "object" && request !== null && !refused.has(request)) refused.set(request, err);
}

/** The refusal a decoder marked on `request`, if any. */
export function requestRefusal(request: unknown): KeycapError | undefined {
  return typeof request === "object" && request !== null ? refused.get(request) : undefined;
}
