package mcpsink_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keycap/keycap/clients/go/mcpsink"
	"github.com/keycap/keycap/clients/go/sink"
)

// The shared capability-verification vectors, sent as tools/call through the
// middleware. What applies: every vector whose capability travels as a bare
// token (the `_meta` member carries the compact JWS, so vectors about the
// Bearer syntax of an authorization header do not apply), and "no
// authorization" as a call without the member. A refused vector must be
// refused with its reason; an accepted one passes verification and meets the
// call's own checks: an Idempotent vector capability has no derivation claim
// (the vectors predate it), so it cannot be bound to arguments (CLAIM_MISSING);
// an Unsafe or Queryable one is admitted and its handler runs. The verdict is
// every sink's (expect_by.sink when the vector states one: a shadow or replay
// capability is refused SANDBOX_CAPABILITY_NOT_LIVE).
type verdict struct {
	Verified map[string]any `json:"verified"`
	Refused  string         `json:"refused"`
}

type vectorFile struct {
	Verifier struct {
		Issuer                string `json:"issuer"`
		Audience              string `json:"audience"`
		MaxTokenBytes         int    `json:"max_token_bytes"`
		MaxLifetimeSeconds    int    `json:"max_lifetime_seconds"`
		ClockToleranceSeconds int    `json:"clock_tolerance_seconds"`
	} `json:"verifier"`
	Vectors []struct {
		Name          string             `json:"name"`
		Token         string             `json:"token"`
		Authorization json.RawMessage    `json:"authorization"`
		JWKS          json.RawMessage    `json:"jwks"`
		Clock         int64              `json:"clock"`
		Expect        verdict            `json:"expect"`
		ExpectBy      map[string]verdict `json:"expect_by"`
	} `json:"vectors"`
}

func TestCapabilityVectorsThroughTheMiddleware(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "..", "..", "test", "vectors", "capability-verification.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f vectorFile
	if err := json.Unmarshal(text, &f); err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, v := range f.Vectors {
		meta := withCapability(v.Token)
		if v.Authorization != nil {
			var a *string
			if err := json.Unmarshal(v.Authorization, &a); err != nil {
				t.Fatal(err)
			}
			switch {
			case a == nil:
				meta = nil
			case strings.TrimSpace(*a) == "":
				meta = withCapability(*a)
			default:
				continue // the Bearer header's syntax: not how _meta carries a capability
			}
		}
		ran++
		t.Run(v.Name, func(t *testing.T) {
			expect, claims := v.Expect, v.Expect
			if by, ok := v.ExpectBy["sink"]; ok {
				expect = by
			}
			if by, ok := v.ExpectBy["ledger"]; ok {
				claims = by
			}
			toolID, effect := "payments.charge", ""
			if claims.Verified != nil {
				toolID = claims.Verified["tool_id"].(string)
			}
			if expect.Verified != nil {
				effect = expect.Verified["effect"].(string)
			}
			jwks := v.JWKS
			keys := sink.NewRemoteKeys(func(context.Context) ([]byte, error) {
				if string(jwks) == "null" {
					return nil, errors.New("GetSigningKeys at 127.0.0.1:1: connection refused")
				}
				return jwks, nil
			}, sink.KernelKeysOptions{})
			clock := time.Unix(v.Clock, 0)
			guard, err := mcpsink.New(mcpsink.Options{
				Name: "vectors", Tools: map[string]string{"tool": toolID}, Keys: keys,
				SpentStore: sink.NewMemorySpentStore(func() time.Time { return clock }),
				Verifier: sink.VerifierOptions{
					Issuer: f.Verifier.Issuer, Audience: f.Verifier.Audience, MaxTokenBytes: f.Verifier.MaxTokenBytes,
					MaxLifetimeSeconds: f.Verifier.MaxLifetimeSeconds, ClockToleranceSeconds: f.Verifier.ClockToleranceSeconds,
					Now: func() time.Time { return clock },
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			ts := serve(t, guard, "tool")
			_, err = ts.call("tool", `{"order_id":"A-17"}`, meta)
			want := expect.Refused
			if effect == sink.EffectIdempotent {
				want = sink.ReasonClaimMissing
			}
			if want == "" {
				if err != nil || ts.calls["tool"].Load() != 1 {
					t.Fatalf("want admitted, got %v", err)
				}
				return
			}
			if _, data := refusal(t, err); data.Reason != want || data.ToolID != toolID {
				t.Fatalf("got %+v, want %s", data, want)
			}
			if ts.calls["tool"].Load() != 0 {
				t.Fatal("the handler ran")
			}
		})
	}
	if ran < 70 {
		t.Fatalf("only %d vectors apply", ran)
	}
}
