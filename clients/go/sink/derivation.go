package sink

import "github.com/keycap/keycap/clients/go/keyderive"

// Derivation is the `derivation` claim (ADR 0026): the key's canonical
// document (ADR 0002) without the field values, which come from the call's
// arguments.
type Derivation struct {
	// Version is the derivation version hashed (≥ 1).
	Version int64 `json:"version"`
	// Fields are the RFC 6901 pointers exactly as registered.
	Fields []string `json:"fields"`
	// Context holds exactly the context fields the derivation names, with the
	// values the kernel derived with.
	Context DerivationContext `json:"context"`
}

// DerivationContext is the claim's context: the run id when the derivation
// names it.
type DerivationContext struct {
	RunID *string `json:"run_id,omitempty"`
}

// Key re-derives the key of a call to toolID with these raw JSON arguments,
// as the kernel did; the error is the kernel's refusal (*keyderive.Error).
func (d *Derivation) Key(toolID string, arguments []byte) (string, error) {
	var ctx keyderive.Context
	if d.Context.RunID != nil {
		ctx.RunID = *d.Context.RunID
	}
	return keyderive.Key(toolID, d.spec(), arguments, ctx)
}

// spec is the derivation the claim states: the run id is named when present.
func (d *Derivation) spec() keyderive.Derivation {
	spec := keyderive.Derivation{Fields: d.Fields, Version: d.Version}
	if d.Context.RunID != nil {
		spec.ContextFields = []string{keyderive.ContextRunID}
	}
	return spec
}

// derivationProblem is the claim's shape check, the one the minter and every
// verifier apply (services/capability/src/claims.ts): optional, idempotent
// only, and exactly {version ≥ 1, fields: non-empty strings, context: {run_id?: string}}.
func derivationProblem(p map[string]any, allowed bool) string {
	raw, present := p["derivation"]
	if !present {
		return ""
	}
	if !allowed {
		return "is only allowed when effect is idempotent"
	}
	d, ok := raw.(map[string]any)
	if !ok {
		return "must be an object"
	}
	for member := range d {
		if member != "version" && member != "fields" && member != "context" {
			return "has a member other than version, fields and context"
		}
	}
	if v, ok := d["version"].(float64); !ok || !isSafeInteger(v) || v < 1 {
		return "version must be a positive integer"
	}
	fields, ok := d["fields"].([]any)
	if !ok || len(fields) == 0 {
		return "fields must be a non-empty array of pointers"
	}
	for _, f := range fields {
		if _, ok := f.(string); !ok {
			return "fields must be a non-empty array of pointers"
		}
	}
	ctx, ok := d["context"].(map[string]any)
	if !ok {
		return "context must be an object"
	}
	for member, v := range ctx {
		if _, isString := v.(string); member != "run_id" || !isString {
			return "context may hold only run_id, a string"
		}
	}
	return ""
}

// derivationOf reads a claim derivationProblem accepted; nil when absent.
func derivationOf(raw any) *Derivation {
	m, ok := raw.(map[string]any)
	if !ok {
		return nil
	}
	d := &Derivation{Version: int64(m["version"].(float64))}
	for _, f := range m["fields"].([]any) {
		d.Fields = append(d.Fields, f.(string))
	}
	if r, ok := m["context"].(map[string]any)["run_id"].(string); ok {
		d.Context.RunID = &r
	}
	return d
}
