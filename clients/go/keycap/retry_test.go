package keycap_test

// The client through a service that is restarting (issue 15): every call waits
// for its channel to be ready, and an UNAVAILABLE answer (keycap's "retry") is
// resent within the deadline, except a single-use capability's write. A real
// in-process gRPC server stands in for the kernel and the ledger, so the
// failures happen exactly when the test says.

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	effectv1 "github.com/keycap/keycap/clients/go/gen/keycap/effect/v1"
	kernelv1 "github.com/keycap/keycap/clients/go/gen/keycap/kernel/v1"
	ledgerv1 "github.com/keycap/keycap/clients/go/gen/keycap/ledger/v1"
	"github.com/keycap/keycap/clients/go/keycap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

const (
	fakeRuntimeToken = "runtime-token"
	fakeCapability   = "capability-token"
)

// flaky answers code the first failures times it is called (every time when
// failures < 0), then OK, and counts the calls it saw.
type flaky struct {
	failures int
	code     codes.Code
	calls    atomic.Int32
}

func (f *flaky) answer() error {
	n := int(f.calls.Add(1))
	if f.failures >= 0 && n > f.failures {
		return nil
	}
	st := status.New(f.code, "the database is unavailable; retry")
	if f.code == codes.Unavailable {
		// What the keycap services send with UNAVAILABLE.
		var err error
		st, err = st.WithDetails(
			&errdetails.ErrorInfo{Reason: "DATABASE_UNAVAILABLE", Domain: keycap.Domain},
			&errdetails.RetryInfo{RetryDelay: durationpb.New(500 * time.Millisecond)},
		)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
	}
	return st.Err()
}

// requireBearer refuses (UNAUTHENTICATED, never resent) a try that does not
// carry exactly `authorization: Bearer <want>`: every resend must carry it too.
func requireBearer(ctx context.Context, want string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer "+want {
		return status.Errorf(codes.Unauthenticated, "authorization %q, want Bearer %s", got, want)
	}
	return nil
}

// fakeLedger is a LedgerService whose Write is flaky.
type fakeLedger struct {
	ledgerv1.UnimplementedLedgerServiceServer
	flaky
}

func (l *fakeLedger) Write(ctx context.Context, req *ledgerv1.WriteRequest) (*ledgerv1.WriteResponse, error) {
	if err := requireBearer(ctx, fakeCapability); err != nil {
		return nil, err
	}
	if err := l.answer(); err != nil {
		return nil, err
	}
	return &ledgerv1.WriteResponse{Entry: &ledgerv1.Entry{Key: req.GetKey(), RequestId: req.GetRequestId()}}, nil
}

// fakeKernel is a KernelService whose BeginCall is flaky; the tool id names
// the effect kind of the call it begins (e.g. "EFFECT_KIND_UNSAFE").
type fakeKernel struct {
	kernelv1.UnimplementedKernelServiceServer
	flaky
	mu      sync.Mutex
	callIDs []string // the call id of every BeginCall received
}

func (k *fakeKernel) BeginCall(ctx context.Context, req *kernelv1.BeginCallRequest) (*kernelv1.BeginCallResponse, error) {
	if err := requireBearer(ctx, fakeRuntimeToken); err != nil {
		return nil, err
	}
	k.mu.Lock()
	k.callIDs = append(k.callIDs, req.GetCallId())
	k.mu.Unlock()
	if err := k.answer(); err != nil {
		return nil, err
	}
	kind, ok := effectv1.EffectKind_value[req.GetToolId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "tool %q", req.GetToolId())
	}
	c := &kernelv1.Call{CallId: "call-1", ToolId: req.GetToolId(), EffectKind: effectv1.EffectKind(kind), Attempt: 1}
	switch c.EffectKind {
	case effectv1.EffectKind_EFFECT_KIND_IDEMPOTENT:
		c.Key = "key-1"
	case effectv1.EffectKind_EFFECT_KIND_QUERYABLE:
		c.RequestId = "request-1"
	}
	return &kernelv1.BeginCallResponse{Call: c, Capability: fakeCapability}, nil
}

// serve runs kernel and ledger (either may be nil) on lis until the test ends.
func serve(t *testing.T, lis net.Listener, kernel *fakeKernel, ledger *fakeLedger) {
	t.Helper()
	s := grpc.NewServer()
	if kernel != nil {
		kernelv1.RegisterKernelServiceServer(s, kernel)
	}
	if ledger != nil {
		ledgerv1.RegisterLedgerServiceServer(s, ledger)
	}
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
}

// listen listens on a free loopback port.
func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// startFakes serves kernel and ledger on one free loopback port and returns a
// KernelClient (with that ledger) and a LedgerClient connected to it.
func startFakes(t *testing.T, kernel *fakeKernel, ledger *fakeLedger, opts ...keycap.Option) (*keycap.KernelClient, *keycap.LedgerClient) {
	t.Helper()
	lis := listen(t)
	serve(t, lis, kernel, ledger)
	addr := lis.Addr().String()
	return newFakeKernel(t, addr, addr, opts...), newFakeLedger(t, addr, opts...)
}

func newFakeKernel(t *testing.T, kernelAddr, ledgerAddr string, opts ...keycap.Option) *keycap.KernelClient {
	t.Helper()
	k, err := keycap.NewKernelClient(kernelAddr, append([]keycap.Option{keycap.WithLedger(ledgerAddr), keycap.WithToken(fakeRuntimeToken)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	return k
}

func newFakeLedger(t *testing.T, addr string, opts ...keycap.Option) *keycap.LedgerClient {
	t.Helper()
	l, err := keycap.NewLedgerClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// begin begins a call of the given effect kind on the fake kernel.
func begin(t *testing.T, k *keycap.KernelClient, kind effectv1.EffectKind) *keycap.CapabilityHandle {
	t.Helper()
	h, err := k.Begin(testContext(t), kind.String(), map[string]any{"n": 1})
	if err != nil {
		t.Fatalf("Begin(%s): %v", kind, err)
	}
	if h.EffectKind() != kind {
		t.Fatalf("Begin(%s): handle of kind %s", kind, h.EffectKind())
	}
	return h
}

// requireCode checks err is a *keycap.Error with code.
func requireCode(t *testing.T, err error, code codes.Code) *keycap.Error {
	t.Helper()
	var kerr *keycap.Error
	if !errors.As(err, &kerr) || kerr.Code != code {
		t.Fatalf("expected a *keycap.Error %s, got %v", code, err)
	}
	return kerr
}

func requireCalls(t *testing.T, f *flaky, want int) {
	t.Helper()
	if got := int(f.calls.Load()); got != want {
		t.Fatalf("the server saw %d calls, want %d", got, want)
	}
}

func TestRetryIdempotentWriteSucceedsAfterUnavailableAnswers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(*keycap.CapabilityHandle, *keycap.LedgerClient) (*ledgerv1.WriteResponse, error)
	}{
		{"CapabilityHandle.Write", func(h *keycap.CapabilityHandle, _ *keycap.LedgerClient) (*ledgerv1.WriteResponse, error) {
			return h.Write(context.Background(), []byte("x"))
		}},
		{"LedgerClient.WriteWithCapability", func(h *keycap.CapabilityHandle, l *keycap.LedgerClient) (*ledgerv1.WriteResponse, error) {
			return l.WriteWithCapability(context.Background(), fakeCapability, &ledgerv1.WriteRequest{Key: h.Key(), Payload: []byte("x")})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ledger := &fakeLedger{flaky: flaky{failures: 2, code: codes.Unavailable}}
			k, l := startFakes(t, &fakeKernel{}, ledger)
			h := begin(t, k, effectv1.EffectKind_EFFECT_KIND_IDEMPOTENT)
			res, err := tc.write(h, l)
			if err != nil {
				t.Fatalf("write after 2 UNAVAILABLE answers: %v", err)
			}
			if res.GetEntry().GetKey() != h.Key() {
				t.Fatalf("entry %v, want key %s", res.GetEntry(), h.Key())
			}
			requireCalls(t, &ledger.flaky, 3)
		})
	}
}

func TestRetryKernelCallSucceedsAfterUnavailableAnswers(t *testing.T) {
	kernel := &fakeKernel{flaky: flaky{failures: 2, code: codes.Unavailable}}
	k, _ := startFakes(t, kernel, &fakeLedger{})
	begin(t, k, effectv1.EffectKind_EFFECT_KIND_UNSAFE) // a kernel call is safe to resend, whatever the tool's effect
	requireCalls(t, &kernel.flaky, 3)
	// Each resend names the same call, chosen by the client, so a resend after
	// a lost answer finds the call the first try journaled.
	kernel.mu.Lock()
	defer kernel.mu.Unlock()
	if len(kernel.callIDs) != 3 || kernel.callIDs[0] == "" || kernel.callIDs[1] != kernel.callIDs[0] || kernel.callIDs[2] != kernel.callIDs[0] {
		t.Fatalf("BeginCall call ids %q: want one client-chosen id on every resend", kernel.callIDs)
	}
}

func TestRetrySingleUseWriteIsNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kind  effectv1.EffectKind
		write func(*keycap.CapabilityHandle, *keycap.LedgerClient) (*ledgerv1.WriteResponse, error)
	}{
		{"Unsafe handle", effectv1.EffectKind_EFFECT_KIND_UNSAFE, writeThroughHandle},
		{"Queryable handle", effectv1.EffectKind_EFFECT_KIND_QUERYABLE, writeThroughHandle},
		// The handle's rule is the Python client's: anything but Idempotent is single-use.
		{"unspecified-kind handle", effectv1.EffectKind_EFFECT_KIND_UNSPECIFIED, writeThroughHandle},
		{"LedgerClient.WriteWithCapabilityOnce", effectv1.EffectKind_EFFECT_KIND_QUERYABLE, func(h *keycap.CapabilityHandle, l *keycap.LedgerClient) (*ledgerv1.WriteResponse, error) {
			return l.WriteWithCapabilityOnce(context.Background(), fakeCapability, &ledgerv1.WriteRequest{RequestId: h.RequestID(), Payload: []byte("x")})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ledger := &fakeLedger{flaky: flaky{failures: 1, code: codes.Unavailable}}
			k, l := startFakes(t, &fakeKernel{}, ledger)
			h := begin(t, k, tc.kind)
			_, err := tc.write(h, l)
			if kerr := requireCode(t, err, codes.Unavailable); kerr.Reason != "DATABASE_UNAVAILABLE" {
				t.Fatalf("reason %q, want the server's DATABASE_UNAVAILABLE", kerr.Reason)
			}
			requireCalls(t, &ledger.flaky, 1)
		})
	}
}

func writeThroughHandle(h *keycap.CapabilityHandle, _ *keycap.LedgerClient) (*ledgerv1.WriteResponse, error) {
	return h.Write(context.Background(), []byte("x"))
}

func TestRetryOtherCodesAreNotRetried(t *testing.T) {
	for _, code := range []codes.Code{codes.Internal, codes.Aborted, codes.Unknown, codes.ResourceExhausted, codes.FailedPrecondition} {
		t.Run(code.String(), func(t *testing.T) {
			ledger := &fakeLedger{flaky: flaky{failures: 1, code: code}}
			k, _ := startFakes(t, &fakeKernel{}, ledger)
			h := begin(t, k, effectv1.EffectKind_EFFECT_KIND_IDEMPOTENT)
			_, err := h.Write(context.Background(), []byte("x"))
			requireCode(t, err, code)
			requireCalls(t, &ledger.flaky, 1)
		})
	}
}

func TestRetryStopsAtTheDeadline(t *testing.T) {
	const deadline = 1500 * time.Millisecond
	const slack = 300 * time.Millisecond
	for _, tc := range []struct {
		name string
		opts []keycap.Option
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"WithCallTimeout", []keycap.Option{keycap.WithCallTimeout(deadline)}, func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}},
		{"context deadline", nil, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), deadline)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ledger := &fakeLedger{flaky: flaky{failures: -1, code: codes.Unavailable}}
			k, _ := startFakes(t, &fakeKernel{}, ledger, tc.opts...)
			h := begin(t, k, effectv1.EffectKind_EFFECT_KIND_IDEMPOTENT)
			ctx, cancel := tc.ctx()
			defer cancel()
			started := time.Now()
			_, err := h.Write(ctx, []byte("x"))
			elapsed := time.Since(started)
			// The last answer, not a DEADLINE_EXCEEDED of a try sent too late.
			requireCode(t, err, codes.Unavailable)
			if elapsed > deadline+slack {
				t.Fatalf("the write returned after %v, past its %v deadline", elapsed, deadline)
			}
			// Backoffs of 50-100, 100-200, 200-400 ms and 400-800 ms fit in 1.5 s
			// at least three times: the answer was resent until the deadline.
			if n := ledger.calls.Load(); n < 3 {
				t.Fatalf("the server saw %d calls in %v, want at least 3", n, elapsed)
			}
			t.Logf("%d tries in %v", ledger.calls.Load(), elapsed)
		})
	}
}

func TestRetryCallWaitsForTheServiceToListen(t *testing.T) {
	kernelLis := listen(t)
	serve(t, kernelLis, &fakeKernel{}, nil)
	// A port nothing listens on yet: the ledger starts there a second later.
	reserved := listen(t)
	ledgerAddr := reserved.Addr().String()
	if err := reserved.Close(); err != nil {
		t.Fatal(err)
	}
	k := newFakeKernel(t, kernelLis.Addr().String(), ledgerAddr)
	// Unsafe: its write is never resent, so only waiting for the ledger to be
	// ready can make it succeed (a resent Idempotent write would hide a
	// missing wait).
	h := begin(t, k, effectv1.EffectKind_EFFECT_KIND_UNSAFE)

	ledger := &fakeLedger{}
	srv := grpc.NewServer()
	ledgerv1.RegisterLedgerServiceServer(srv, ledger)
	t.Cleanup(srv.Stop) // a Serve after Stop closes its listener at once
	listened := make(chan error, 1)
	started := time.Now()
	late := time.AfterFunc(time.Second, func() {
		lis, err := net.Listen("tcp", ledgerAddr)
		listened <- err
		if err == nil {
			_ = srv.Serve(lis)
		}
	})
	t.Cleanup(func() { late.Stop() })

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := h.Write(ctx, []byte("x")); err != nil {
		select {
		case lerr := <-listened:
			if lerr != nil {
				t.Skipf("the ledger could not listen on the reserved port: %v", lerr)
			}
		default:
		}
		t.Fatalf("write while the ledger was starting: %v", err)
	}
	if waited := time.Since(started); waited < 900*time.Millisecond {
		t.Fatalf("the write returned after %v, before the ledger listened", waited)
	}
	requireCalls(t, &ledger.flaky, 1)
}

// A credential too large for the HTTP/2 header limit would be reset by the
// transport into a bare INTERNAL with nothing recorded: refused before sending.
func TestCredentialTooLargeForHeadersIsRefusedBeforeSending(t *testing.T) {
	ledger := &fakeLedger{flaky: flaky{failures: 0}}
	_, l := startFakes(t, &fakeKernel{}, ledger)
	_, err := l.WriteWithCapability(context.Background(), strings.Repeat("x", 100*1024), &ledgerv1.WriteRequest{Key: "k", Payload: []byte("x")})
	if kerr := requireCode(t, err, codes.InvalidArgument); kerr.Reason != "CAPABILITY_TOO_LARGE" {
		t.Fatalf("reason %q, want CAPABILITY_TOO_LARGE", kerr.Reason)
	}
	requireCalls(t, &ledger.flaky, 0)
}

// Ill-formed UTF-8 in the arguments or run id is refused before sending.
func TestIllFormedUTF8IsRefusedBeforeSending(t *testing.T) {
	kernel := &fakeKernel{flaky: flaky{failures: 0}}
	k, _ := startFakes(t, kernel, &fakeLedger{})
	for _, tc := range []struct {
		args string
		opts []keycap.BeginOption
	}{
		{"{\"v\":\"\xff\"}", nil},
		{"{}", []keycap.BeginOption{keycap.WithRunID("run-\xfe")}},
	} {
		_, err := k.BeginCall(context.Background(), "EFFECT_KIND_IDEMPOTENT", tc.args, tc.opts...)
		if kerr := requireCode(t, err, codes.InvalidArgument); kerr.Reason != "INVALID_UTF8" {
			t.Fatalf("reason %q, want INVALID_UTF8", kerr.Reason)
		}
	}
	requireCalls(t, &kernel.flaky, 0)
}
