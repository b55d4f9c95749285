package sink

import (
	"context"
	"errors"

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
// call.Arguments with its derivation claim (KEY_MISMATCH; a capability
// without the claim cannot be bound and is refused the same way, ADR 0026);
// unsafe and queryable capabilities are spent once. Refusals are recorded
// against the capability's tool id, as Admit's are.
func (s *Sink) AdmitCall(ctx context.Context, req Request, call Call) (*Capability, error) {
	return s.admit(ctx, req, &call)
}

// bindArguments refuses an idempotent capability carried by arguments other
// than those its key was derived from.
func bindArguments(c *Capability, arguments []byte) *Refusal {
	if c.Derivation == nil {
		return permissionDenied(ReasonKeyMismatch, "the capability carries no derivation claim, so these arguments cannot be bound to its key")
	}
	key, err := c.Derivation.Key(c.ToolID, arguments)
	if err != nil {
		// Arguments the kernel would not key (a key field missing, not an
		// object…) cannot be the ones it keyed.
		r := permissionDenied(ReasonKeyMismatch, "the call's arguments do not derive the capability's key: "+err.Error())
		var e *keyderive.Error
		if errors.As(err, &e) {
			r.Metadata = map[string]string{"derivation_error": e.Reason}
		}
		return r
	}
	if key != c.Key {
		return permissionDenied(ReasonKeyMismatch, "the call's arguments derive another key than the capability's: the capability was minted for another call")
	}
	return nil
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
