package mcpsink_test

import (
	"testing"
	"time"

	"github.com/keycap/keycap/clients/go/internal/capsigner"
	"github.com/keycap/keycap/clients/go/keyderive"
	"github.com/keycap/keycap/clients/go/mcpsink"
	"github.com/keycap/keycap/clients/go/sink"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Capabilities signed with the vectors' test key (a kernel stand-in), so the
// derivation claim's every shape can be tried without a kernel; the real
// kernel's are in e2e_test.go.

const (
	chargeID = "mcp:payments/charge"
	notifyID = "mcp:payments/notify"
	args     = `{"order_id":"A-17","amount_cents":500,"note":"first"}`
)

var chargeDerivation = keyderive.Derivation{Fields: []string{"/order_id", "/amount_cents"}, Version: 1}

func signedGuard(t *testing.T) (*capsigner.Signer, *testServer) {
	t.Helper()
	signer, err := capsigner.Load("kernel-current")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := sink.NewStaticKeys(signer.JWKS)
	if err != nil {
		t.Fatal(err)
	}
	guard, err := mcpsink.New(mcpsink.Options{
		Name: "payments", Tools: map[string]string{"charge": "", "notify": ""}, Keys: keys,
		SpentStore: sink.NewMemorySpentStore(nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	return signer, serve(t, guard, "charge", "notify", "echo")
}

// chargeClaims is what the kernel mints for charge(args): key and derivation claim.
func chargeClaims(t *testing.T, jti, arguments string) map[string]any {
	t.Helper()
	c := capsigner.Claims(chargeID, "idempotent", jti, time.Now())
	key, err := keyderive.Key(chargeID, chargeDerivation, []byte(arguments), keyderive.Context{})
	if err != nil {
		t.Fatal(err)
	}
	c["key"] = key
	c["derivation"] = map[string]any{"version": 1, "fields": chargeDerivation.Fields, "context": map[string]any{}}
	return c
}

func TestAdmitsTheCallItsCapabilityWasMintedForAndHandsTheHandlerTheKey(t *testing.T) {
	signer, ts := signedGuard(t)
	claims := chargeClaims(t, "j-ok", args)
	// Same key fields, other spelling and a changed non-key field: the same call.
	same := `{ "note":"retry", "amount_cents":5e2, "order_id":"A\u002d17" }`
	for _, a := range []string{args, same} {
		if _, err := ts.call("charge", a, withCapability(signer.Sign(claims))); err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		if got := <-ts.keys; got != claims["key"] {
			t.Fatalf("handler read key %q, want %q", got, claims["key"])
		}
	}
	if n := ts.calls["charge"].Load(); n != 2 {
		t.Fatalf("charge ran %d times", n)
	}
}

func TestRefusesBeforeTheHandlerRuns(t *testing.T) {
	signer, ts := signedGuard(t)
	noDerivation := chargeClaims(t, "j-nd", args)
	delete(noDerivation, "derivation")
	expired := chargeClaims(t, "j-exp", args)
	expired["iat"], expired["exp"] = time.Now().Unix()-600, time.Now().Unix()-300
	unusable := chargeClaims(t, "j-np", args)
	unusable["derivation"] = map[string]any{"version": 1, "fields": []string{"order_id"}, "context": map[string]any{}}
	runScoped := chargeClaims(t, "j-run", args)
	runScoped["derivation"] = map[string]any{"version": 1, "fields": chargeDerivation.Fields, "context": map[string]any{"run_id": "run-B"}}
	cases := []struct {
		name   string
		args   string
		meta   mcp.Meta
		reason string
	}{
		{"no capability", args, nil, sink.ReasonCapabilityMissing},
		{"capability not a string", args, mcp.Meta{mcpsink.MetaCapability: 7}, sink.ReasonCapabilityMalformed},
		{"not a JWS", args, withCapability("not-a-token"), sink.ReasonCapabilityMalformed},
		{"other amount", `{"order_id":"A-17","amount_cents":50000}`, withCapability(signer.Sign(chargeClaims(t, "j1", args))), sink.ReasonKeyMismatch},
		{"key field dropped", `{"amount_cents":500}`, withCapability(signer.Sign(chargeClaims(t, "j2", args))), sink.ReasonKeyMismatch},
		{"another run's key", args, withCapability(signer.Sign(runScoped)), sink.ReasonKeyMismatch},
		{"no derivation claim", args, withCapability(signer.Sign(noDerivation)), sink.ReasonClaimMissing},
		{"derivation no pointer", args, withCapability(signer.Sign(unusable)), sink.ReasonClaimInvalid},
		{"blank capability", args, withCapability("  "), sink.ReasonCapabilityMissing},
		{"expired", args, withCapability(signer.Sign(expired)), sink.ReasonExpired},
		{"another tool's", args, withCapability(signer.Sign(capsigner.Claims(notifyID, "unsafe", "j3", time.Now()))), sink.ReasonToolNotAccepted},
		{"a tool the server does not serve", args, withCapability(signer.Sign(capsigner.Claims("other.tool", "idempotent", "j4", time.Now()))), sink.ReasonToolNotAccepted},
		{"gateway key differs", args, mcp.Meta{mcpsink.MetaCapability: signer.Sign(chargeClaims(t, "j5", args)), mcpsink.MetaIdempotencyKey: "other"}, sink.ReasonKeyMismatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ts.call("charge", c.args, c.meta)
			code, data := refusal(t, err)
			if data.Reason != c.reason || data.ToolID != chargeID || data.Domain != "keycap.dev" || code != jsonrpc.CodeInvalidParams {
				t.Fatalf("got code %d %+v, want %s for %s", code, data, c.reason, chargeID)
			}
		})
	}
	if n := ts.calls["charge"].Load(); n != 0 {
		t.Fatalf("the charge handler ran %d times for refused calls", n)
	}
}

func TestChecksTheDerivationClaimsShape(t *testing.T) {
	signer, ts := signedGuard(t)
	bad := []any{
		"v1",
		map[string]any{"version": 0, "fields": []string{"/order_id"}, "context": map[string]any{}},
		map[string]any{"version": 1, "fields": []string{}, "context": map[string]any{}},
		map[string]any{"version": 1, "fields": []any{7}, "context": map[string]any{}},
		map[string]any{"version": 1, "fields": []string{"/order_id"}, "context": map[string]any{"run_id": 7}},
		map[string]any{"version": 1, "fields": []string{"/order_id"}, "context": map[string]any{"user": "u"}},
		map[string]any{"version": 1, "fields": []string{"/order_id"}, "context": map[string]any{}, "salt": "x"},
		map[string]any{"version": 1, "fields": []string{"/order_id"}},
	}
	for i, d := range bad {
		claims := chargeClaims(t, "shape", args)
		claims["derivation"] = d
		_, err := ts.call("charge", args, withCapability(signer.Sign(claims)))
		if _, data := refusal(t, err); data.Reason != sink.ReasonClaimInvalid || data.Metadata["claim"] != "derivation" {
			t.Fatalf("case %d: %+v, want CLAIM_INVALID naming derivation", i, data)
		}
	}
	// Allowed on idempotent capabilities only.
	unsafe := capsigner.Claims(notifyID, "unsafe", "shape-u", time.Now())
	unsafe["derivation"] = map[string]any{"version": 1, "fields": []string{"/to"}, "context": map[string]any{}}
	_, err := ts.call("notify", `{"to":"a"}`, withCapability(signer.Sign(unsafe)))
	if _, data := refusal(t, err); data.Reason != sink.ReasonClaimInvalid || data.Metadata["claim"] != "derivation" {
		t.Fatalf("%+v, want CLAIM_INVALID naming derivation", data)
	}
	if ts.calls["charge"].Load()+ts.calls["notify"].Load() != 0 {
		t.Fatal("a handler ran")
	}
}

func TestSpendsAnUnsafeCapabilityOnceAndPassesUngovernedTools(t *testing.T) {
	signer, ts := signedGuard(t)
	token := signer.Sign(capsigner.Claims(notifyID, "unsafe", "j-once", time.Now()))
	if _, err := ts.call("notify", `{"to":"a"}`, withCapability(token)); err != nil {
		t.Fatal(err)
	}
	if key := <-ts.keys; key != "" {
		t.Fatalf("an unsafe call has no key, the handler read %q", key)
	}
	_, err := ts.call("notify", `{"to":"a"}`, withCapability(token))
	if _, data := refusal(t, err); data.Reason != sink.ReasonCapabilityReused || data.ToolID != notifyID {
		t.Fatalf("%+v, want CAPABILITY_REUSED", data)
	}
	if n := ts.calls["notify"].Load(); n != 1 {
		t.Fatalf("notify ran %d times, want 1", n)
	}
	// A tool the author did not mark is none of keycap's business.
	if _, err := ts.call("echo", `{}`, nil); err != nil || ts.calls["echo"].Load() != 1 {
		t.Fatalf("ungoverned tool: %v", err)
	}
}
