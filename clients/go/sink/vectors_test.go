package sink

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// The shared vectors (test/vectors/capability-verification.json) are the
// contract every keycap verifier is held to: the ledger's, and this one.
type vectorFile struct {
	Verifier struct {
		Issuer                string `json:"issuer"`
		Audience              string `json:"audience"`
		MaxTokenBytes         int    `json:"max_token_bytes"`
		MaxLifetimeSeconds    int    `json:"max_lifetime_seconds"`
		ClockToleranceSeconds int    `json:"clock_tolerance_seconds"`
	} `json:"verifier"`
	Keys    map[string]map[string]string `json:"keys"`
	Vectors []vector                     `json:"vectors"`
}

type vector struct {
	Name          string          `json:"name"`
	Token         string          `json:"token"`
	Authorization json.RawMessage `json:"authorization"`
	JWKS          json.RawMessage `json:"jwks"`
	Clock         int64           `json:"clock"`
	Expect        struct {
		Verified          map[string]any `json:"verified"`
		Refused           string         `json:"refused"`
		SignatureVerified bool           `json:"signature_verified"`
	} `json:"expect"`
}

func loadVectors(t testing.TB) vectorFile {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", "..", "..", "test", "vectors", "capability-verification.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f vectorFile
	if err := json.Unmarshal(text, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Vectors) < 50 {
		t.Fatalf("only %d vectors", len(f.Vectors))
	}
	return f
}

func TestVerifierGivesEveryVectorsVerdict(t *testing.T) {
	f := loadVectors(t)
	for _, vec := range f.Vectors {
		t.Run(vec.Name, func(t *testing.T) {
			// As the ledger's vector runner: a fresh remote source per vector whose
			// fetch answers the vector's JWKS, or fails when it is null.
			keys := NewRemoteKeys(func(context.Context) ([]byte, error) {
				if string(vec.JWKS) == "null" {
					return nil, errors.New("GetSigningKeys at 127.0.0.1:1: connection refused")
				}
				return vec.JWKS, nil
			}, KernelKeysOptions{})
			v, err := NewVerifier(keys, VerifierOptions{
				Issuer: f.Verifier.Issuer, Audience: f.Verifier.Audience, MaxTokenBytes: f.Verifier.MaxTokenBytes,
				MaxLifetimeSeconds: f.Verifier.MaxLifetimeSeconds, ClockToleranceSeconds: f.Verifier.ClockToleranceSeconds,
				Now: func() time.Time { return time.Unix(vec.Clock, 0) },
			})
			if err != nil {
				t.Fatal(err)
			}
			authorization, present := "Bearer "+vec.Token, true
			if vec.Authorization != nil {
				var a *string
				if err := json.Unmarshal(vec.Authorization, &a); err != nil {
					t.Fatal(err)
				}
				if a == nil {
					authorization, present = "", false
				} else {
					authorization = *a
				}
			}
			c, err := v.Verify(context.Background(), authorization, present)
			if vec.Expect.Verified != nil {
				if err != nil {
					t.Fatalf("want verified, got %v", err)
				}
				b, _ := json.Marshal(c)
				var got map[string]any
				_ = json.Unmarshal(b, &got)
				if !reflect.DeepEqual(got, vec.Expect.Verified) {
					t.Fatalf("claims\n got %v\nwant %v", got, vec.Expect.Verified)
				}
				return
			}
			var r *Refusal
			if !errors.As(err, &r) {
				t.Fatalf("want refusal %s, got %v", vec.Expect.Refused, err)
			}
			if r.Reason != vec.Expect.Refused || r.SignatureVerified != vec.Expect.SignatureVerified {
				t.Fatalf("got %s (signature_verified %v), want %s (%v): %s", r.Reason, r.SignatureVerified, vec.Expect.Refused, vec.Expect.SignatureVerified, r.Message)
			}
		})
	}
}
