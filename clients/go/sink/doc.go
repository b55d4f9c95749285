// Package sink makes a Go service an enforcing keycap sink (ADR 0013,
// docs/decisions/0013-sink-sdks.md): a request is admitted only under a
// genuine capability minted by the kernel for one of the sink's tools, checked
// offline with exactly the ledger's strict profile (ADR 0003) and refused with
// the ledger's reasons, in the ledger's order.
//
// Admission, in this fixed order:
//
//  1. verification (carrier, size, strict compact JWS, header profile, Ed25519
//     signature against the kernel's JWKS, claims);
//  2. the tool allow-list (TOOL_NOT_ACCEPTED);
//  3. the request's own idempotency key against the capability's (KEY_MISMATCH);
//  4. single use of unsafe and queryable capabilities through a SpentStore
//     (CAPABILITY_REUSED; EFFECT_CLASS_MISMATCH without a store).
//
// Handlers read the verified claims with CapabilityFromContext; nothing the
// request says about itself is presented as verified. Every refusal goes to the
// OnRefusal hook and, with a Recorder, into keycap's `rejections` collection
// under service "sink:<name>", where `keycap rejections --service sink:<name>`
// lists it.
package sink
