package sink

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"

	"github.com/keycap/keycap/clients/go/keyderive"
)

// Call is a tool call a sink receives whole, arguments included (an MCP
// server's tools/call): more than a write under a key, so the capability must
// be for exactly this call.
type Call struct {
	// ToolID is the keycap tool the call is for; a capability for any other,
	// even one this sink serves, is refused TOOL_NOT_ACCEPTED.
	ToolID string
	// Arguments is the call's arguments as received, raw JSON. An idempotent
	// capability's key must re-derive from them (KEY_MISMATCH otherwise).
	Arguments []byte
}

// AdmitCall is Admit for a call whose arguments the sink holds. After
// verification, in this order: the capability names call.ToolID
// (TOOL_NOT_ACCEPTED); the request's own key, if any, is the capability's
// (KEY_MISMATCH); an idempotent capability's key re-derives from
// call.Arguments with its derivation claim (KEY_MISMATCH; CLAIM_MISSING naming
// "derivation" for a capability without the claim, which cannot be bound,
// ADR 0026; CLAIM_INVALID for a claim that is no usable derivation);
// unsafe and queryable capabilities are spent once. Refusals are recorded
// against the capability's tool id, as Admit's are.
func (s *Sink) AdmitCall(ctx context.Context, req Request, call Call) (*Capability, error) {
	return s.admit(ctx, req, &call)
}

// bindArguments refuses an idempotent capability carried by arguments other
// than those its key was derived from. Reasons and metadata are the
// TypeScript sink's (services/sink/src/argument-binding.ts), so every
// language gives one verdict.
func bindArguments(c *Capability, arguments []byte) *Refusal {
	if c.Derivation == nil {
		// Minted before the claim existed: its key cannot be tied to any arguments.
		return claimRefusal(ReasonClaimMissing, `the capability has no "derivation" claim, so its key cannot be bound to these arguments; begin the call again with a current kernel`, nil)
	}
	if err := keyderive.Validate(c.Derivation.spec()); err != nil {
		var e *keyderive.Error
		errors.As(err, &e)
		return claimRefusal(ReasonClaimInvalid, `capability claim "derivation" is not a usable derivation: `+e.Message, map[string]string{"problem": e.Reason})
	}
	if len(arguments) == 0 {
		// tools/call without arguments: the empty object, as the SDKs read it.
		arguments = []byte("{}")
	}
	key, err := c.Derivation.Key(c.ToolID, arguments)
	if err != nil {
		// Arguments the kernel would not key (a key field missing, not an
		// object…) cannot be the ones it keyed.
		r := permissionDenied(ReasonKeyMismatch, "the arguments received give no key under the capability's derivation ("+err.Error()+"); the capability was minted for other arguments")
		var e *keyderive.Error
		if errors.As(err, &e) {
			r.Metadata = map[string]string{"rederivation": e.Reason}
			for k, v := range e.Metadata {
				r.Metadata[k] = v
			}
		}
		return r
	}
	if key != c.Key {
		r := permissionDenied(ReasonKeyMismatch, "the key derived from the arguments received is not the capability's key: the capability was minted for other arguments")
		r.Metadata = map[string]string{"derived_key": key}
		return r
	}
	return nil
}

// claimRefusal is a refusal about a verified claim, naming it "derivation".
func claimRefusal(reason, message string, metadata map[string]string) *Refusal {
	r := &Refusal{Code: codes.Unauthenticated, Reason: reason, Message: message, SignatureVerified: true,
		Metadata: map[string]string{"claim": "derivation"}}
	for k, v := range metadata {
		r.Metadata[k] = v
	}
	return r
}

// recordAgainst files a call's refusal under the tool that was called, which
// the sink knows whatever the capability says (or when there is none); the id
// counts as verified only when a verified capability names that same tool.
func (call *Call) recordAgainst(rec RefusalRecord) RefusalRecord {
	if call == nil {
		return rec
	}
	rec.ToolIDVerified = rec.ToolIDVerified && rec.ToolID == call.ToolID
	rec.ToolID = call.ToolID
	return rec
}
