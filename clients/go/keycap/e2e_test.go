package keycap_test

// End-to-end tests against a real keycap stack (MongoDB-protocol server,
// kernel, ledger, admin as real processes), started once by TestMain.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	effectv1 "github.com/keycap/keycap/clients/go/gen/keycap/effect/v1"
	kernelv1 "github.com/keycap/keycap/clients/go/gen/keycap/kernel/v1"
	ledgerv1 "github.com/keycap/keycap/clients/go/gen/keycap/ledger/v1"
	"github.com/keycap/keycap/clients/go/internal/e2estack"
	"github.com/keycap/keycap/clients/go/keycap"
	"github.com/keycap/keycap/clients/go/reasons"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var stack *e2estack.Stack

func TestMain(m *testing.M) {
	s, err := e2estack.Start(e2estack.StartTimeout())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stack = s
	fmt.Fprintf(os.Stderr, "keycap e2e stack: kernel %s ledger %s admin %s (MongoDB backend: %s)\n", s.Kernel, s.Ledger, s.Admin, s.MongoBackend)
	code := m.Run()
	if code != 0 && os.Getenv("KEYCAP_E2E_LOGS") != "" {
		fmt.Fprintf(os.Stderr, "--- e2e-stack stderr ---\n%s", s.Logs())
		if tlsStackStarted != nil {
			fmt.Fprintf(os.Stderr, "--- e2e-stack (TLS) stderr ---\n%s", tlsStackStarted.Logs())
		}
	}
	s.Stop()
	if tlsStackStarted != nil {
		tlsStackStarted.Stop()
	}
	os.Exit(code)
}

// The TLS stack (KEYCAP_E2E_TLS=1), started by the first test that needs it.
var (
	tlsStackOnce    sync.Once
	tlsStackStarted *e2estack.Stack
	tlsStackErr     error
)

func tlsStack(t *testing.T) *e2estack.Stack {
	t.Helper()
	tlsStackOnce.Do(func() {
		tlsStackStarted, tlsStackErr = e2estack.StartTLS(e2estack.StartTimeout())
		if tlsStackErr == nil {
			fmt.Fprintf(os.Stderr, "keycap e2e TLS stack: kernel %s ledger %s admin %s\n", tlsStackStarted.Kernel, tlsStackStarted.Ledger, tlsStackStarted.Admin)
		}
	})
	if tlsStackErr != nil {
		t.Fatalf("TLS stack: %v", tlsStackErr)
	}
	return tlsStackStarted
}

// clients for one test, closed at its end.
type clients struct {
	kernel *keycap.KernelClient
	ledger *keycap.LedgerClient
	admin  *keycap.AdminClient
}

func newClients(t *testing.T) clients {
	t.Helper()
	k, err := keycap.NewKernelClient(stack.Kernel, keycap.WithLedger(stack.Ledger), keycap.WithToken(stack.RuntimeToken))
	if err != nil {
		t.Fatal(err)
	}
	l, err := keycap.NewLedgerClient(stack.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	a, err := keycap.NewAdminClient(stack.Admin, stack.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close(); _ = l.Close(); _ = a.Close() })
	return clients{kernel: k, ledger: l, admin: a}
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func uniqueID(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "." + hex.EncodeToString(b)
}

// registerCharge registers a fresh Idempotent tool keyed on /order_id.
func registerCharge(t *testing.T, ctx context.Context, k *keycap.KernelClient, prefix string) string {
	t.Helper()
	id := uniqueID(prefix)
	res, err := k.RegisterTool(ctx, keycap.Tool{
		ID:     id,
		Effect: keycap.Idempotent(keycap.KeyDerivation{Fields: []string{"/order_id"}}),
	})
	if err != nil {
		t.Fatalf("RegisterTool(%s): %v", id, err)
	}
	if res.GetAlreadyRegistered() {
		t.Fatalf("RegisterTool(%s): fresh id reported already registered", id)
	}
	return id
}

// requireRefusal checks err is a *keycap.Error with this code and reason.
func requireRefusal(t *testing.T, err error, code codes.Code, reason string) *keycap.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("expected %s %s, got success", code, reason)
	}
	var kerr *keycap.Error
	if !errors.As(err, &kerr) {
		t.Fatalf("expected a *keycap.Error, got %T: %v", err, err)
	}
	if kerr.Code != code || kerr.Reason != reason {
		t.Fatalf("expected %s %s, got %s %s (%s)", code, reason, kerr.Code, kerr.Reason, kerr.Message)
	}
	if kerr.Domain != keycap.Domain {
		t.Fatalf("ErrorInfo domain = %q, want %q", kerr.Domain, keycap.Domain)
	}
	// The real service's refusal is the generated catalogue's: the reason is in it, with this code.
	if want, ok := reasons.Code(kerr.Reason); !ok || want != kerr.Code {
		t.Fatalf("refusal %s %s: the catalogue (package reasons) has %s (in it: %t)", kerr.Code, kerr.Reason, want, ok)
	}
	return kerr
}

// findRejection returns the refusal recorded against toolID with this attempted key.
func findRejection(t *testing.T, ctx context.Context, a *keycap.AdminClient, toolID, attemptedKey string) *ledgerv1.Rejection {
	t.Helper()
	rejections, err := a.ListRejections(ctx, keycap.RejectionFilter{ToolID: toolID})
	if err != nil {
		t.Fatalf("ListRejections(%s): %v", toolID, err)
	}
	for _, r := range rejections {
		if r.GetAttemptedKey() == attemptedKey {
			return r
		}
	}
	t.Fatalf("no refusal recorded against %s with attempted key %q (got %d refusals)", toolID, attemptedKey, len(rejections))
	return nil
}

func TestWriteThroughHandleRecordsOneEntryAndARetryIsADuplicate(t *testing.T) {
	ctx := testContext(t)
	c := newClients(t)
	toolID := registerCharge(t, ctx, c.kernel, "go.e2e.charge")
	args := map[string]any{"order_id": "o-" + uniqueID("1"), "cents": 500}

	h1, err := c.kernel.Begin(ctx, toolID, args)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	if h1.Key() == "" || h1.ToolID() != toolID || h1.Attempt() != 1 || h1.EffectKind() != effectv1.EffectKind_EFFECT_KIND_IDEMPOTENT {
		t.Fatalf("unexpected handle %v", h1)
	}
	w1, err := h1.Write(ctx, []byte(`{"charged":500}`))
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if w1.GetDuplicate() || w1.GetEntry().GetKey() != h1.Key() || w1.GetEntry().GetToolId() != toolID {
		t.Fatalf("first write: %v", w1)
	}
	entry, err := c.admin.GetEntryByKey(ctx, h1.Key())
	if err != nil {
		t.Fatalf("GetEntryByKey: %v", err)
	}
	if entry.GetEntryId() != w1.GetEntry().GetEntryId() || string(entry.GetPayload()) != `{"charged":500}` {
		t.Fatalf("admin sees %v, want entry %s", entry, w1.GetEntry().GetEntryId())
	}
	entries, err := c.admin.ListEntries(ctx, toolID)
	if err != nil {
		t.Fatalf("ListEntries: %v", err)
	}
	if len(entries) != 1 {
		t.Fatalf("ListEntries(%s) = %d entries, want 1", toolID, len(entries))
	}

	// The same call begun again (a retry) gets the same key; its write is a duplicate.
	h2, err := c.kernel.Begin(ctx, toolID, args)
	if err != nil {
		t.Fatalf("second Begin: %v", err)
	}
	if h2.Key() != h1.Key() {
		t.Fatalf("same arguments, different key: %s vs %s", h2.Key(), h1.Key())
	}
	w2, err := h2.Write(ctx, []byte(`{"charged":500}`))
	if err != nil {
		t.Fatalf("second Write: %v", err)
	}
	if !w2.GetDuplicate() || w2.GetEntry().GetEntryId() != w1.GetEntry().GetEntryId() {
		t.Fatalf("second write: duplicate=%v entry=%s, want duplicate of %s", w2.GetDuplicate(), w2.GetEntry().GetEntryId(), w1.GetEntry().GetEntryId())
	}
	if entries, err = c.admin.ListEntries(ctx, toolID); err != nil || len(entries) != 1 {
		t.Fatalf("after the retry ListEntries(%s) = %d entries (err %v), want still 1", toolID, len(entries), err)
	}

	if _, err := h1.Complete(ctx, keycap.Succeeded, "charged"); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	stats, err := c.admin.Stats(ctx)
	if err != nil || stats.GetEntries() < 1 || stats.GetDuplicates() < 1 {
		t.Fatalf("Stats = %v (err %v), want at least one entry and one duplicate", stats, err)
	}
}

func TestWriteUnderAnotherKeyIsRefusedAndRecordedAgainstTheTool(t *testing.T) {
	ctx := testContext(t)
	c := newClients(t)
	toolID := registerCharge(t, ctx, c.kernel, "go.e2e.misbehave")

	res, err := c.kernel.BeginCall(ctx, toolID, `{"order_id":"o-42","cents":100}`)
	if err != nil {
		t.Fatalf("BeginCall: %v", err)
	}
	otherKey := "not-the-kernels-key-" + uniqueID("k")
	_, err = c.ledger.WriteWithCapability(ctx, res.GetCapability(), &ledgerv1.WriteRequest{Key: otherKey, Payload: []byte("x")})
	kerr := requireRefusal(t, err, codes.PermissionDenied, keycap.ReasonKeyMismatch)
	if keycap.ReasonOf(err) != keycap.ReasonKeyMismatch || status.Code(err) != codes.PermissionDenied {
		t.Fatalf("ReasonOf/status.Code do not see through the error: %q %s", keycap.ReasonOf(err), status.Code(err))
	}
	if !strings.Contains(kerr.Error(), "KEY_MISMATCH") {
		t.Fatalf("Error() = %q", kerr.Error())
	}

	r := findRejection(t, ctx, c.admin, toolID, otherKey)
	if r.GetToolId() != toolID || !r.GetToolIdVerified() || r.GetReason() != keycap.ReasonKeyMismatch ||
		r.GetCapabilityKey() != res.GetCall().GetKey() || r.GetCallId() != res.GetCall().GetCallId() {
		t.Fatalf("recorded refusal %v does not attribute the write to %s", r, toolID)
	}
	if _, err := c.admin.GetEntryByKey(ctx, otherKey); status.Code(err) != codes.NotFound {
		t.Fatalf("GetEntryByKey(other key) = %v, want NOT_FOUND: the refused write must leave no entry", err)
	}
}

// A capability minted for another tool (in issue 6: a Python tool's) replayed
// by this Go tool under another key is refused, and recorded against the tool
// the capability was minted for.
func TestAnotherToolsCapabilityReplayedUnderAnotherKeyIsRefused(t *testing.T) {
	ctx := testContext(t)
	c := newClients(t)
	foreignTool := registerCharge(t, ctx, c.kernel, "py.e2e.charge")
	goTool := registerCharge(t, ctx, c.kernel, "go.e2e.replayer")

	foreign, err := c.kernel.BeginCall(ctx, foreignTool, `{"order_id":"o-7","cents":700}`)
	if err != nil {
		t.Fatalf("BeginCall(%s): %v", foreignTool, err)
	}
	own, err := c.kernel.Begin(ctx, goTool, map[string]any{"order_id": "o-7", "cents": 700})
	if err != nil {
		t.Fatalf("Begin(%s): %v", goTool, err)
	}
	if own.Key() == foreign.GetCall().GetKey() {
		t.Fatal("two tools derived the same key; the tool id must enter the key")
	}

	// The Go tool writes under its own key with the foreign capability.
	_, err = c.ledger.WriteWithCapability(ctx, foreign.GetCapability(), &ledgerv1.WriteRequest{Key: own.Key(), Payload: []byte("replay")})
	requireRefusal(t, err, codes.PermissionDenied, keycap.ReasonKeyMismatch)

	r := findRejection(t, ctx, c.admin, foreignTool, own.Key())
	if !r.GetToolIdVerified() || r.GetToolId() != foreignTool || r.GetCapabilityKey() != foreign.GetCall().GetKey() {
		t.Fatalf("refusal %v not attributed to %s", r, foreignTool)
	}
	if _, err := c.admin.GetEntryByKey(ctx, own.Key()); status.Code(err) != codes.NotFound {
		t.Fatalf("GetEntryByKey(%s) = %v, want NOT_FOUND", own.Key(), err)
	}
	// Its own handle still writes under its own key.
	if w, err := own.Write(ctx, []byte("own")); err != nil || w.GetDuplicate() {
		t.Fatalf("own write: %v %v", w, err)
	}
}

func TestWriteWithoutCapabilityIsUnauthenticated(t *testing.T) {
	ctx := testContext(t)
	c := newClients(t)
	_, err := c.ledger.WriteWithCapability(ctx, "", &ledgerv1.WriteRequest{Key: "k", Payload: []byte("x")})
	requireRefusal(t, err, codes.Unauthenticated, keycap.ReasonCapabilityMissing)
}

func TestResumeReissuesACapabilityForTheSameKey(t *testing.T) {
	ctx := testContext(t)
	c := newClients(t)
	toolID := registerCharge(t, ctx, c.kernel, "go.e2e.resume")
	h, err := c.kernel.Begin(ctx, toolID, `{"order_id":"o-9","cents":900}`, keycap.WithCallID(uniqueID("call")))
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	// "Crash" before the write: the call is left pending. (A write would have completed it:
	// the ledger's entry is the call's completion, ADR 0034.)
	pending, err := c.kernel.ListPending(ctx, toolID)
	if err != nil || len(pending) != 1 || pending[0].GetCallId() != h.CallID() {
		t.Fatalf("ListPending(%s) = %v (err %v), want the one call %s", toolID, pending, err, h.CallID())
	}
	res, err := c.kernel.Resume(ctx, h.CallID())
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if res.Action != kernelv1.ResumeAction_RESUME_ACTION_RETRY || res.Handle == nil {
		t.Fatalf("Resume action %s, want RETRY with a handle", res.Action)
	}
	if res.Handle.Key() != h.Key() || res.Handle.Attempt() != 2 {
		t.Fatalf("resumed handle key=%s attempt=%d, want key %s attempt 2", res.Handle.Key(), res.Handle.Attempt(), h.Key())
	}
	first, err := res.Handle.Write(ctx, []byte("first"))
	if err != nil {
		t.Fatalf("resumed Write: %v", err)
	}
	if first.GetDuplicate() || !first.GetCompletesCall() {
		t.Fatalf("the resumed write is the call's one effect and completes it: %v", first)
	}
	// The first attempt's capability, late: the same key, so the same effect.
	again, err := h.Write(ctx, []byte("first"))
	if err != nil {
		t.Fatalf("late Write of attempt 1: %v", err)
	}
	if !again.GetDuplicate() || again.GetEntry().GetEntryId() != first.GetEntry().GetEntryId() {
		t.Fatalf("the late write is not a duplicate of the first: %v", again)
	}
	if _, err := res.Handle.Complete(ctx, keycap.Succeeded, ""); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if pending, err = c.kernel.ListPending(ctx, toolID); err != nil || len(pending) != 0 {
		t.Fatalf("after Complete ListPending = %v (err %v), want none", pending, err)
	}
}

func TestAdminRefusesWithoutTheCredential(t *testing.T) {
	ctx := testContext(t)
	a, err := keycap.NewAdminClient(stack.Admin, "wrong-token")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	_, err = a.Stats(ctx)
	requireRefusal(t, err, codes.Unauthenticated, "ADMIN_CREDENTIAL_INVALID")
}

func TestHandleDoesNotPrintItsCapability(t *testing.T) {
	ctx := testContext(t)
	c := newClients(t)
	toolID := registerCharge(t, ctx, c.kernel, "go.e2e.print")
	res, err := c.kernel.BeginCall(ctx, toolID, `{"order_id":"o-1"}`)
	if err != nil {
		t.Fatalf("BeginCall: %v", err)
	}
	h, err := c.kernel.Begin(ctx, toolID, `{"order_id":"o-1"}`)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	// Signatures differ per mint; the payload part of the JWS is never printed either.
	sig := res.GetCapability()[strings.LastIndex(res.GetCapability(), ".")+1:]
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(format, h); strings.Contains(out, "eyJ") || strings.Contains(out, sig) {
			t.Fatalf("%s of a handle prints the capability: %s", format, out)
		}
	}
}
