package keycap

import (
	"encoding/json"

	effectv1 "github.com/keycap/keycap/clients/go/gen/keycap/effect/v1"
	kernelv1 "github.com/keycap/keycap/clients/go/gen/keycap/kernel/v1"
)

// Tool is a tool as the runtime declares it to the kernel.
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
	// At least one; the kernel refuses an empty list with INVALID_ARGUMENT.
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
// looked up by the request id found at requestIDField (an RFC 6901 pointer).
func Queryable(requestIDField string) Effect {
	return Effect{pb: &effectv1.EffectClass{Kind: &effectv1.EffectClass_Queryable{Queryable: &effectv1.Queryable{
		Lookup: &effectv1.RequestIdLookup{RequestIdField: requestIDField},
	}}}}
}

// Unsafe declares a tool that is never retried automatically.
func Unsafe() Effect {
	return Effect{pb: &effectv1.EffectClass{Kind: &effectv1.EffectClass_Unsafe{Unsafe: &effectv1.Unsafe{}}}}
}

// Proto returns the wire form of the tool.
func (t Tool) Proto() *kernelv1.Tool {
	return &kernelv1.Tool{ToolId: t.ID, EffectClass: t.Effect.pb, ArgumentsSchemaJson: string(t.ArgumentsSchema)}
}
