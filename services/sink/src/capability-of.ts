/**
 * The verified capability of an admitted request, looked up by the request object the
 * transport hands the handler (a grpc-js call, a node:http IncomingMessage). A WeakMap,
 * not a property, so nothing the client sent can pose as verified claims.
 */
import type { VerifiedCapability } from "../../capability/src";

const admitted = new WeakMap<object, VerifiedCapability>();

export function remember(request: object, capability: VerifiedCapability): void {
  admitted.set(request, capability);
}

/**
 * The verified claims of a request the sink admitted.
 *
 * @throws Error when the request did not pass through the sink (a wiring mistake: the
 * handler would otherwise run an effect without a capability).
 */
export function capabilityOf(request: object): VerifiedCapability {
  const cap = admitted.get(request);
  if (!cap) throw new Error("this request was not admitted by a keycap sink: wrap the handler with protectService / protectHttp");
  return cap;
}
