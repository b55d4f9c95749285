package sink_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap/clients/go/internal/capsigner"
	"github.com/keycap/keycap/clients/go/sink"
)

// Admission rules checked without a stack: tokens signed with the vectors'
// test kernel key, verified against its JWKS.

func testSink(t *testing.T, opts sink.Options) (*sink.Sink, *capsigner.Signer) {
	t.Helper()
	signer, err := capsigner.Load("kernel-current")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := sink.NewStaticKeys(signer.JWKS)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Name == "" {
		opts.Name = "unit"
	}
	if opts.Tools == nil {
		opts.Tools = []string{"payments.charge"}
	}
	opts.Keys = keys
	s, err := sink.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, signer
}

func reasonOf(err error) string {
	var r *sink.Refusal
	if errors.As(err, &r) {
		return r.Reason
	}
	return ""
}

func admit(s *sink.Sink, token string) error {
	_, err := s.Admit(context.Background(), sink.Request{Method: "/t/T", Peer: "127.0.0.1:1", Authorization: []string{"Bearer " + token}})
	return err
}

func TestRacingPresentationsOfOneUnsafeCapabilityRunOnce(t *testing.T) {
	s, signer := testSink(t, sink.Options{SpentStore: sink.NewMemorySpentStore(nil)})
	token := signer.Sign(capsigner.Claims("payments.charge", "unsafe", "race-1", time.Now()))
	var admitted, reused atomic.Int32
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch err := admit(s, token); reasonOf(err) {
			case "":
				admitted.Add(1)
			case sink.ReasonCapabilityReused:
				reused.Add(1)
			default:
				t.Errorf("unexpected %v", err)
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != 1 || reused.Load() != 31 {
		t.Fatalf("admitted %d, reused %d", admitted.Load(), reused.Load())
	}
}

func TestWithoutASpentStoreOnlyIdempotentCapabilitiesRun(t *testing.T) {
	s, signer := testSink(t, sink.Options{})
	for _, effect := range []string{"unsafe", "queryable"} {
		if r := reasonOf(admit(s, signer.Sign(capsigner.Claims("payments.charge", effect, "e-"+effect, time.Now())))); r != sink.ReasonEffectClassMismatch {
			t.Fatalf("%s without a store: %q", effect, r)
		}
	}
	if err := admit(s, signer.Sign(capsigner.Claims("payments.charge", "idempotent", "e-i", time.Now()))); err != nil {
		t.Fatal(err)
	}
}

type failingStore struct{}

func (failingStore) Spend(context.Context, sink.SpentCapability) (bool, error) {
	return false, errors.New("connection refused")
}

func TestAStoreThatCannotAnswerRefusesRetryablyAndRunsNothing(t *testing.T) {
	s, signer := testSink(t, sink.Options{SpentStore: failingStore{}})
	ran := false
	srv := httptest.NewServer(s.HTTP(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true })))
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL, nil)
	req.Header.Set("Authorization", "Bearer "+signer.Sign(capsigner.Claims("payments.charge", "unsafe", "db-1", time.Now())))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if ran || res.StatusCode != 503 || res.Header.Get("Retry-After") != "1" {
		t.Fatalf("ran %v, status %d, Retry-After %q", ran, res.StatusCode, res.Header.Get("Retry-After"))
	}
}

func TestOwnCapabilityHeaderTakesABareToken(t *testing.T) {
	s, signer := testSink(t, sink.Options{CapabilityHeader: "Keycap-Capability"})
	var seen string
	srv := httptest.NewServer(s.HTTP(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		c, _ := sink.CapabilityFromContext(r.Context())
		seen = c.Key
	})))
	defer srv.Close()
	token := signer.Sign(capsigner.Claims("payments.charge", "idempotent", "h-1", time.Now()))
	for _, v := range []string{token, "Bearer " + token} {
		seen = ""
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("Authorization", "Basic dXNlcjpwYXNz") // the service's own users
		req.Header.Set("Keycap-Capability", v)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 || seen != "key-h-1" {
			t.Fatalf("%q: status %d, key %q", v[:10], res.StatusCode, seen)
		}
	}
}

func TestTwoAuthorizationValuesAreMalformedAsAtTheLedger(t *testing.T) {
	s, signer := testSink(t, sink.Options{})
	token := signer.Sign(capsigner.Claims("payments.charge", "idempotent", "two", time.Now()))
	_, err := s.Admit(context.Background(), sink.Request{Authorization: []string{"Bearer " + token, "Bearer " + token}})
	if reasonOf(err) != sink.ReasonCapabilityMalformed {
		t.Fatalf("%v", err)
	}
}

func TestUnknownKidsRefetchAtMostOncePerCooldown(t *testing.T) {
	signer, _ := capsigner.Load("kernel-current")
	var fetches atomic.Int32
	keys := sink.NewRemoteKeys(func(context.Context) ([]byte, error) {
		fetches.Add(1)
		return signer.JWKS, nil
	}, sink.KernelKeysOptions{RefetchCooldown: 300 * time.Millisecond})
	ctx := context.Background()
	if k, err := keys.Key(ctx, signer.Kid); err != nil || k == nil {
		t.Fatalf("known kid: %v %v", k, err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if k, err := keys.Key(ctx, fmt.Sprintf("made-up-%d", i)); k != nil || err != nil {
				t.Errorf("made-up kid: %v %v", k, err)
			}
		}()
	}
	wg.Wait()
	// A made-up kid waits for the next allowed fetch and then is unknown; all
	// twenty share that one fetch.
	if n := fetches.Load(); n != 2 {
		t.Fatalf("%d fetches for one known and twenty made-up kids, want 2", n)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatal("lookups waited more than a cooldown")
	}
}

func TestKeySetWithPrivateMaterialIsRefused(t *testing.T) {
	_, err := sink.NewStaticKeys([]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k","x":"QoEN61rUqvRsLHjUxGtWvaD7GW84vkZvG3q5G1z_PBM","d":"secret"}]}`))
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("%v", err)
	}
	var _ sink.KeySource = sink.KeySourceFunc(func(context.Context, string) (ed25519.PublicKey, error) { return nil, nil })
}

func TestOverflowingNumberIsReadAsJavaScriptReadsIt(t *testing.T) {
	// JSON.parse reads 1e400 as Infinity, a number: the ledger refuses the claim
	// (CLAIM_INVALID after the signature), not the payload as unreadable.
	s, signer := testSink(t, sink.Options{})
	now := time.Now().Unix()
	payload := fmt.Sprintf(`{"iss":"keycap-kernel","aud":"keycap-ledger","sub":"r","tool_id":"payments.charge","effect":"idempotent","call_id":"c","attempt":1,"jti":"j","key":"k","iat":%d,"exp":1e400}`, now)
	err := admit(s, signer.SignPayload([]byte(payload)))
	var r *sink.Refusal
	if !errors.As(err, &r) || r.Reason != sink.ReasonClaimInvalid || !r.SignatureVerified || r.Metadata["claim"] != "exp" {
		t.Fatalf("%v", err)
	}
}
