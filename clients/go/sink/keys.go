package sink

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	kernelv1 "github.com/keycap/keycap/clients/go/gen/keycap/kernel/v1"
	"google.golang.org/grpc"
)

// KeySource is where a Verifier gets the kernel's public keys, by kid.
// Implementations parse key material once, never per verification.
type KeySource interface {
	// Key returns the key for kid, or nil when the source does not know it; an
	// error when it cannot tell (the refusal is then SIGNING_KEYS_UNAVAILABLE).
	Key(ctx context.Context, kid string) (ed25519.PublicKey, error)
}

// JWKSError is a JWKS refused as a key source.
type JWKSError struct{ msg string }

func (e *JWKSError) Error() string { return e.msg }

var jwkX = regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`)

// ParseJWKS reads a JWKS as the ledger accepts one: public Ed25519 keys only,
// each with a kid. A set holding private material or another kind of key is
// refused whole (a configuration mistake that skipping would hide).
func ParseJWKS(text []byte) (map[string]ed25519.PublicKey, error) {
	var raw map[string]any
	if err := json.Unmarshal(text, &raw); err != nil {
		// Not echoing the parser's message: it may quote a private key.
		return nil, &JWKSError{"JWKS is not valid JSON"}
	}
	arr, ok := raw["keys"].([]any)
	if !ok {
		return nil, &JWKSError{`JWKS must be an object with a "keys" array`}
	}
	keys := make(map[string]ed25519.PublicKey, len(arr))
	for i, e := range arr {
		where := fmt.Sprintf("JWKS key %d", i)
		k, ok := e.(map[string]any)
		if !ok {
			return nil, &JWKSError{where + " is not an object"}
		}
		for _, m := range []string{"d", "p", "q", "dp", "dq", "qi", "k", "priv"} {
			if _, has := k[m]; has {
				return nil, &JWKSError{fmt.Sprintf("%s holds private key material (%q); publish public keys only", where, m)}
			}
		}
		if k["kty"] != "OKP" || k["crv"] != "Ed25519" {
			return nil, &JWKSError{where + ` is not an Ed25519 key (need kty "OKP", crv "Ed25519")`}
		}
		kid, _ := k["kid"].(string)
		if kid == "" {
			return nil, &JWKSError{where + ` has no "kid"`}
		}
		if alg, has := k["alg"]; has && alg != "EdDSA" {
			return nil, &JWKSError{where + ` has alg other than "EdDSA"`}
		}
		if use, has := k["use"]; has && use != "sig" {
			return nil, &JWKSError{where + ` has use other than "sig"`}
		}
		x, _ := k["x"].(string)
		if !jwkX.MatchString(x) {
			return nil, &JWKSError{where + ` has no valid public key ("x")`}
		}
		if _, dup := keys[kid]; dup {
			return nil, &JWKSError{"JWKS repeats kid " + kid}
		}
		pub, err := base64.RawURLEncoding.DecodeString(x)
		if err != nil || len(pub) != ed25519.PublicKeySize {
			return nil, &JWKSError{where + " is not a usable Ed25519 public key"}
		}
		keys[kid] = ed25519.PublicKey(pub)
	}
	return keys, nil
}

// StaticKeys is a fixed JWKS, for sinks without a kernel link.
type StaticKeys struct{ keys map[string]ed25519.PublicKey }

// NewStaticKeys parses a JWKS given as text; an empty set is refused.
func NewStaticKeys(jwks []byte) (*StaticKeys, error) {
	keys, err := ParseJWKS(jwks)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, &JWKSError{"JWKS contains no keys"}
	}
	return &StaticKeys{keys: keys}, nil
}

// LoadStaticKeys reads a JWKS file once (at most 1 MiB).
func LoadStaticKeys(path string) (*StaticKeys, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &JWKSError{fmt.Sprintf("JWKS file %s: cannot be read", path)}
	}
	if st.Size() > 1<<20 {
		return nil, &JWKSError{fmt.Sprintf("JWKS file %s: is %d bytes; too large for a JWKS", path, st.Size())}
	}
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, &JWKSError{fmt.Sprintf("JWKS file %s: cannot be read", path)}
	}
	s, err := NewStaticKeys(text)
	if err != nil {
		return nil, &JWKSError{fmt.Sprintf("JWKS file %s: %v", path, err)}
	}
	return s, nil
}

// Key implements KeySource.
func (s *StaticKeys) Key(_ context.Context, kid string) (ed25519.PublicKey, error) {
	return s.keys[kid], nil
}

// KernelKeysOptions configures NewKernelKeys.
type KernelKeysOptions struct {
	// RefetchCooldown is the least time between two fetches. Default 1 s.
	RefetchCooldown time.Duration
	// FetchTimeout bounds one GetSigningKeys. Default 3 s.
	FetchTimeout time.Duration
	// OnFetchError is told why a fetch failed.
	OnFetchError func(error)
}

// KernelKeys are the kernel's published keys (KernelService.GetSigningKeys),
// cached by kid. An unknown kid triggers a refetch, at most one per cooldown,
// so made-up kids cannot become a flood of kernel calls; lookups meanwhile
// share that one fetch. A kid is called unknown only while the latest fetch
// succeeded: after a failure the sink cannot tell a forged kid from a freshly
// rotated one, so it answers SIGNING_KEYS_UNAVAILABLE rather than accuse.
type KernelKeys struct {
	fetchJWKS func(ctx context.Context) ([]byte, error)
	opts      KernelKeysOptions

	mu        sync.Mutex
	keys      map[string]ed25519.PublicKey
	lastFetch time.Time
	lastErr   error
	inFlight  chan struct{}
}

// NewKernelKeys fetches from the kernel at conn (GetSigningKeys needs no
// credential); keycap.KernelClient's connection or grpc.NewClient both do.
func NewKernelKeys(conn grpc.ClientConnInterface, opts KernelKeysOptions) *KernelKeys {
	client := kernelv1.NewKernelServiceClient(conn)
	return NewRemoteKeys(func(ctx context.Context) ([]byte, error) {
		res, err := client.GetSigningKeys(ctx, &kernelv1.GetSigningKeysRequest{})
		if err != nil {
			return nil, fmt.Errorf("GetSigningKeys: %w", err)
		}
		return []byte(res.GetJwksJson()), nil
	}, opts)
}

// NewRemoteKeys is KernelKeys over any way of fetching the JWKS text (a
// kernel behind another transport, a test).
func NewRemoteKeys(fetchJWKS func(ctx context.Context) ([]byte, error), opts KernelKeysOptions) *KernelKeys {
	if opts.RefetchCooldown <= 0 {
		opts.RefetchCooldown = time.Second
	}
	if opts.FetchTimeout <= 0 {
		opts.FetchTimeout = 3 * time.Second
	}
	return &KernelKeys{fetchJWKS: fetchJWKS, opts: opts}
}

// Key implements KeySource.
func (k *KernelKeys) Key(ctx context.Context, kid string) (ed25519.PublicKey, error) {
	k.mu.Lock()
	if key, ok := k.keys[kid]; ok {
		k.mu.Unlock()
		return key, nil
	}
	done := k.inFlight
	if done == nil {
		// The kid may be the key the kernel has just rotated to: wait for the next
		// allowed fetch rather than refuse it during the cooldown.
		var wait time.Duration
		if !k.lastFetch.IsZero() {
			wait = k.opts.RefetchCooldown - time.Since(k.lastFetch)
		}
		done = make(chan struct{})
		k.inFlight = done
		go k.fetch(wait, done)
	}
	k.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the kernel's signing keys: %w", ctx.Err())
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if key, ok := k.keys[kid]; ok {
		return key, nil
	}
	if k.lastErr != nil {
		return nil, k.lastErr
	}
	return nil, nil
}

// Refresh fetches now (or waits for the fetch in flight): a sink learns the keys
// before its first request.
func (k *KernelKeys) Refresh(ctx context.Context) error {
	k.mu.Lock()
	done := k.inFlight
	if done == nil {
		done = make(chan struct{})
		k.inFlight = done
		go k.fetch(0, done)
	}
	k.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lastErr
}

func (k *KernelKeys) fetch(wait time.Duration, done chan struct{}) {
	if wait > 0 {
		time.Sleep(wait)
	}
	ctx, cancel := context.WithTimeout(context.Background(), k.opts.FetchTimeout)
	defer cancel()
	started := time.Now()
	text, err := k.fetchJWKS(ctx)
	var keys map[string]ed25519.PublicKey
	if err == nil {
		keys, err = ParseJWKS(text)
	}
	if err != nil {
		err = fmt.Errorf("the kernel's signing keys: %s", oneLine(err.Error()))
		if k.opts.OnFetchError != nil {
			k.opts.OnFetchError(err)
		}
	}
	k.mu.Lock()
	k.lastFetch = started
	k.lastErr = err
	if err == nil {
		// Replace, not merge: a key the kernel stopped publishing must stop verifying.
		k.keys = keys
	}
	k.inFlight = nil
	k.mu.Unlock()
	close(done)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// KeySourceFunc adapts a function to KeySource.
type KeySourceFunc func(ctx context.Context, kid string) (ed25519.PublicKey, error)

// Key implements KeySource.
func (f KeySourceFunc) Key(ctx context.Context, kid string) (ed25519.PublicKey, error) {
	return f(ctx, kid)
}
