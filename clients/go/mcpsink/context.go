package mcpsink

import (
	"context"

	"github.com/keycap/keycap/clients/go/sink"
)

type capabilityKey struct{}

func withCapability(ctx context.Context, c *sink.Capability) context.Context {
	return context.WithValue(ctx, capabilityKey{}, c)
}

// CapabilityFrom is the verified capability the call was admitted under; ok is
// false outside a governed tool's handler.
func CapabilityFrom(ctx context.Context) (*sink.Capability, bool) {
	c, ok := ctx.Value(capabilityKey{}).(*sink.Capability)
	return c, ok && c != nil
}

// KeyFrom is the value that makes the call's effect single: the kernel-derived
// idempotency key of an Idempotent call, or the request id of a Queryable one.
// Pass it on as the downstream API's Idempotency-Key, so the handler's own
// retries are one effect too. ok is false for Unsafe calls (they have neither;
// Capability.JTI identifies the attempt) and outside a governed handler.
func KeyFrom(ctx context.Context) (string, bool) {
	c, ok := CapabilityFrom(ctx)
	if !ok {
		return "", false
	}
	switch c.Effect {
	case sink.EffectIdempotent:
		return c.Key, c.Key != ""
	case sink.EffectQueryable:
		return c.RequestID, c.RequestID != ""
	}
	return "", false
}
