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

type verdict struct {
	Verified          map[string]any `json:"verified"`
	Refused           string         `json:"refused"`
	SignatureVerified bool           `json:"signature_verified"`
}

type vector struct {
	Name          string          `json:"name"`
	Token         string          `json:"token"`
	Authorization json.RawMessage `json:"authorization"`
	JWKS          json.RawMessage `json:"jwks"`
	Clock         int64           `json:"clock"`
	// Expect is what a verifier that does not verify sandbox capabilities
	// answers; ExpectBy["ledger"] what one that does (VerifySandbox) answers,
	// ExpectBy["sink"] what every sink answers (ADR 0028).
	Expect   verdict            `json:"expect"`
	ExpectBy map[string]verdict `json:"expect_by"`
}

// verdictFor is the verdict of a mode-aware verifier ("ledger" or "sink"):
// its own when the vector states one, else Expect.
func (v vector) verdictFor(verifier string) verdict {
	if by, ok := v.ExpectBy[verifier]; ok {
		return by
	}
	return v.Expect
}

// keysFor is the vector's key source, as the ledger's vector runner makes it:
// a fresh remote source whose fetch answers the vector's JWKS, or fails when
// it is null.
func keysFor(vec vector) KeySource {
	return NewRemoteKeys(func(context.Context) ([]byte, error) {
		if string(vec.JWKS) == "null" {
			return nil, errors.New("GetSigningKeys at 127.0.0.1:1: connection refused")
		}
		return vec.JWKS, nil
	}, KernelKeysOptions{})
}

func optionsFor(f vectorFile, vec vector) VerifierOptions {
	return VerifierOptions{
		Issuer: f.Verifier.Issuer, Audience: f.Verifier.Audience, MaxTokenBytes: f.Verifier.MaxTokenBytes,
		MaxLifetimeSeconds: f.Verifier.MaxLifetimeSeconds, ClockToleranceSeconds: f.Verifier.ClockToleranceSeconds,
		Now: func() time.Time { return time.Unix(vec.Clock, 0) },
	}
}

// authorizationOf is the authorization value the vector presents, and whether it presents one.
func authorizationOf(t *testing.T, vec vector) (string, bool) {
	t.Helper()
	if vec.Authorization == nil {
		return "Bearer " + vec.Token, true
	}
	var a *string
	if err := json.Unmarshal(vec.Authorization, &a); err != nil {
		t.Fatal(err)
	}
	if a == nil {
		return "", false
	}
	return *a, true
}

// checkVerdict checks one answer (claims or a refusal) against want.
func checkVerdict(t *testing.T, c *Capability, err error, want verdict) {
	t.Helper()
	if want.Verified != nil {
		if err != nil {
			t.Fatalf("want verified, got %v", err)
		}
		b, _ := json.Marshal(c)
		var got map[string]any
		_ = json.Unmarshal(b, &got)
		if !reflect.DeepEqual(got, want.Verified) {
			t.Fatalf("claims\n got %v\nwant %v", got, want.Verified)
		}
		return
	}
	var r *Refusal
	if !errors.As(err, &r) {
		t.Fatalf("want refusal %s, got %v", want.Refused, err)
	}
	if r.Reason != want.Refused || r.SignatureVerified != want.SignatureVerified {
		t.Fatalf("got %s (signature_verified %v), want %s (%v): %s", r.Reason, r.SignatureVerified, want.Refused, want.SignatureVerified, r.Message)
	}
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
			for _, sandbox := range []bool{false, true} {
				opts := optionsFor(f, vec)
				opts.VerifySandbox = sandbox
				v, err := NewVerifier(keysFor(vec), opts)
				if err != nil {
					t.Fatal(err)
				}
				authorization, present := authorizationOf(t, vec)
				c, err := v.Verify(context.Background(), authorization, present)
				want := vec.Expect
				if sandbox {
					want = vec.verdictFor("ledger")
				}
				checkVerdict(t, c, err, want)
			}
		})
	}
}

// A sink serving every tool, with a spent store, admits exactly what the
// ledger verifies live and refuses the rest with every sink's reason (a shadow
// or replay capability: SANDBOX_CAPABILITY_NOT_LIVE, with the verified tool),
// each refusal reported once.
func TestSinkGivesEveryVectorsSinkVerdict(t *testing.T) {
	f := loadVectors(t)
	var tools []string
	for _, vec := range f.Vectors {
		if id, ok := vec.verdictFor("ledger").Verified["tool_id"].(string); ok {
			tools = append(tools, id)
		}
	}
	for _, vec := range f.Vectors {
		t.Run(vec.Name, func(t *testing.T) {
			var events []RefusalEvent
			s, err := New(Options{
				Name: "vectors", Tools: tools, Keys: keysFor(vec), Verifier: optionsFor(f, vec),
				SpentStore: NewMemorySpentStore(func() time.Time { return time.Unix(vec.Clock, 0) }),
				OnRefusal:  func(e RefusalEvent) { events = append(events, e) },
			})
			if err != nil {
				t.Fatal(err)
			}
			authorization, present := authorizationOf(t, vec)
			req := Request{Method: "vectors", Peer: "127.0.0.1:1"}
			if present {
				req.Authorization = []string{authorization}
			}
			c, err := s.Admit(context.Background(), req)
			want := vec.verdictFor("sink")
			checkVerdict(t, c, err, want)
			if want.Verified == nil && (len(events) != 1 || events[0].Refusal.Reason != want.Refused || events[0].ToolIDVerified != want.SignatureVerified) {
				t.Fatalf("refusal events %+v, want one %s", events, want.Refused)
			}
		})
	}
}
