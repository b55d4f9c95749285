// Package capsigner signs keycap capabilities with the test-only keys published
// in test/vectors/capability-verification.json, for tests and the sink bench.
// It is never a minter: the kernel is.
package capsigner

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

// Signer signs with one of the vectors' keys.
type Signer struct {
	Kid  string
	priv ed25519.PrivateKey
	// JWKS is the public key as a JWKS, for sink.NewStaticKeys.
	JWKS []byte
}

// Load reads key name ("kernel-current", "kernel-retired", "attacker") from the vectors file.
func Load(name string) (*Signer, error) {
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "test", "vectors", "capability-verification.json")
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		Keys map[string]map[string]string `json:"keys"`
	}
	if err := json.Unmarshal(text, &f); err != nil {
		return nil, err
	}
	k, ok := f.Keys[name]
	if !ok || k["crv"] != "Ed25519" {
		return nil, fmt.Errorf("capsigner: no Ed25519 key %q in %s", name, path)
	}
	seed, err := base64.RawURLEncoding.DecodeString(k["d"])
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("capsigner: key %q has no usable seed", name)
	}
	jwks, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "OKP", "crv": "Ed25519", "x": k["x"], "kid": k["kid"], "alg": "EdDSA", "use": "sig"}}})
	return &Signer{Kid: k["kid"], priv: ed25519.NewKeyFromSeed(seed), JWKS: jwks}, nil
}

// Claims returns a valid claim set for tool and effect, issued at now for 300 s.
func Claims(tool, effect, jti string, now time.Time) map[string]any {
	c := map[string]any{
		"iss": "keycap-kernel", "aud": "keycap-ledger", "sub": "test-runtime", "tool_id": tool, "effect": effect,
		"call_id": "call-" + jti, "attempt": 1, "jti": jti, "iat": now.Unix(), "exp": now.Unix() + 300,
	}
	switch effect {
	case "idempotent":
		c["key"] = "key-" + jti
	case "queryable":
		c["request_id"] = "req-" + jti
	}
	return c
}

// Sign makes a compact JWS of claims under the profile's header.
func (s *Signer) Sign(claims map[string]any) string {
	p, _ := json.Marshal(claims)
	return s.SignPayload(p)
}

// SignPayload signs payload bytes exactly as given (JSON Go would not write).
func (s *Signer) SignPayload(p []byte) string {
	h, _ := json.Marshal(map[string]string{"alg": "EdDSA", "typ": "keycap-capability+jwt", "kid": s.Kid})
	in := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(p)
	return in + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(s.priv, []byte(in)))
}
