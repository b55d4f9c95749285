/**
 * The refusal record of a capability, as every verifier that records refusals writes it (the
 * ledger, a sink, the gateways): what the capability says of itself — tool, key, call, jti,
 * signing key, effect — marked verified only when its signature held.
 */
import { codeName } from "../../common/src/errors";
import type { RejectionInput } from "../../common/src/rejection-audit";
import type { CapabilityRefusal } from "./refusal";
import type { VerifiedCapability } from "./verifier";

/** Where and how a refusal was answered: the RPC or route, the caller's address, the message. */
export interface RefusalSite {
  method: string;
  peer: string;
}

/** The record of a capability that did not verify: its claims as read, unverified unless the signature held. */
export function unverifiedRefusalRecord(err: CapabilityRefusal, at: RefusalSite): RejectionInput {
  const u = err.unverified;
  return {
    method: at.method,
    reason: err.reason,
    code: codeName(err.code),
    toolId: u.toolId,
    toolIdVerified: err.signatureVerified,
    capabilityKey: u.key,
    capabilityRequestId: u.requestId,
    callId: u.callId,
    capabilityId: u.jti,
    keyId: u.kid,
    effect: u.effect,
    peer: at.peer,
    message: err.message,
  };
}

/** The record of a verified capability refused by a rule (wrong key, tool, spent, ...). */
export function verifiedRefusalRecord(refusal: { reason: string; code: string; message: string }, cap: VerifiedCapability, at: RefusalSite): RejectionInput {
  return {
    method: at.method,
    reason: refusal.reason,
    code: refusal.code,
    toolId: cap.tool_id,
    toolIdVerified: true,
    principal: cap.sub,
    capabilityKey: cap.key,
    capabilityRequestId: cap.request_id,
    callId: cap.call_id,
    capabilityId: cap.jti,
    keyId: cap.kid,
    effect: cap.effect,
    peer: at.peer,
    message: refusal.message,
  };
}
