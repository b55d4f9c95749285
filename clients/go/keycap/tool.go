package keycap

import (
	"encoding/json"

	effectv1 "github.com/keycap/keycap/clients/go/gen/keycap/effect/v1"
	kernelv1 "github.com/keycap/keycap/clients/go/gen/keycap/kernel/v1"
)

// Tool is a tool as the runtime declares it to the kernel. Validate (and
// RegisterTool, before sending) checks it against the request rules written in
// proto/ and refuses it with the kernel's reason; the helpers below build the
// valid shape from valid input and cannot hide bad input from that check.
type Tool struct {
	// ID is the stable tool id, 1-128 of [A-Za-z0-9._:/-].
	ID string
	// Effect is the declared effect class: Idempotent, Queryable or Unsafe.
	Effect Effect
	// ArgumentsSchema is an optional JSON Schema (2020-12) of the arguments;
	// key fields must be defined there and not volatile.
	ArgumentsSchema json.RawMessage
}

// Effect is a tool's effect class. Build one with Idempotent, Queryable or Unsafe.
type Effect struct {
	pb *effectv1.EffectClass
}

// KeyDerivation says how an Idempotent tool's key is derived.
type KeyDerivation struct {
	// Fields are RFC 6901 JSON Pointers into the arguments, e.g. "/order_id".
	// At least one, each once: an empty list is refused with
	// KEY_DERIVATION_NO_FIELDS, a field named twice with
	// KEY_DERIVATION_DUPLICATE_FIELD, a field that is not a pointer with
	// INVALID_JSON_POINTER (before sending, as the kernel would).
	Fields []string
	// Version is hashed into the key; 0 is sent as 1.
	Version uint32
	// RunID makes the run id part of the key: two identical calls in two runs
	// are two effects, a retry inside one run stays one.
	RunID bool
}

// Idempotent declares a retry-safe tool whose every write carries the key the
// kernel derives as k says.
func Idempotent(k KeyDerivation) Effect {
	version := k.Version
	if version == 0 {
		version = 1
	}
	kd := &effectv1.KeyDerivation{Fields: append([]string(nil), k.Fields...), Version: version}
	if k.RunID {
		kd.ContextFields = []effectv1.ContextField{effectv1.ContextField_CONTEXT_FIELD_RUN_ID}
	}
	return Effect{pb: &effectv1.EffectClass{Kind: &effectv1.EffectClass_Idempotent{Idempotent: &effectv1.Idempotent{Key: kd}}}}
}

// Queryable declares a tool that is not retry-safe but whose effect can be
// looked up by the request id found at requestIDField (an RFC 6901 pointer:
// "" is refused with REQUEST_ID_FIELD_REQUIRED, anything else that is not a
// pointer with INVALID_JSON_POINTER).
func Queryable(requestIDField string) Effect {
	return Effect{pb: &effectv1.EffectClass{Kind: &effectv1.EffectClass_Queryable{Queryable: &effectv1.Queryable{
		Lookup: &effectv1.RequestIdLookup{RequestIdField: requestIDField},
	}}}}
}

// Unsafe declares a tool that is never retried automatically.
func Unsafe() Effect {
	return Effect{pb: &effectv1.EffectClass{Kind: &effectv1.EffectClass_Unsafe{Unsafe: &effectv1.Unsafe{}}}}
}

// Validate checks the tool against the request rules written in proto/
// (protovalidate), as RegisterTool does before sending it: nil, or the
// *Error RegisterTool would return, with the reason the kernel gives for the
// same tool (e.g. KEY_DERIVATION_NO_FIELDS for Idempotent with no Fields,
// INVALID_JSON_POINTER for a field or request id field that is not an RFC 6901
// pointer, EFFECT_CLASS_REQUIRED for a zero Effect, INVALID_TOOL_ID) and a
// FieldViolation per broken rule. The kernel's other checks (the arguments
// schema, key fields defined there) are not made here.
func (t Tool) Validate() error {
	if refusal := checkRequest(&kernelv1.RegisterToolRequest{Tool: t.Proto()}); refusal != nil {
		return refusal
	}
	return nil
}

// Proto returns the wire form of the tool, as given: a tool that breaks a
// request rule (see Validate) is refused by RegisterToolProto before sending.
func (t Tool) Proto() *kernelv1.Tool {
	return &kernelv1.Tool{ToolId: t.ID, EffectClass: t.Effect.pb, ArgumentsSchemaJson: string(t.ArgumentsSchema)}
}
