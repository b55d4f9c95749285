package keycap_test

// ADR 0034, the client's side: after a Write whose entry completes the call
// (the ledger answered CompletesCall), Complete(Succeeded, "") is answered by
// the handle and sends no CompleteCall, alone or in a CompleteCalls batch;
// Failed, a detail, or a write that did not complete the call is sent as
// before. A real in-process gRPC server stands in for the kernel and the
// ledger and counts the RPCs it receives.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	effectv1 "github.com/keycap/keycap/clients/go/gen/keycap/effect/v1"
	kernelv1 "github.com/keycap/keycap/clients/go/gen/keycap/kernel/v1"
	ledgerv1 "github.com/keycap/keycap/clients/go/gen/keycap/ledger/v1"
	"github.com/keycap/keycap/clients/go/keycap"
	"google.golang.org/grpc"
)

// completingKernel is fakeKernel with CompleteCall and CompleteCalls, which
// complete any call and count the RPCs and the calls they carried.
type completingKernel struct {
	fakeKernel
	unary, batches atomic.Int32
	mu             sync.Mutex
	completed      []*kernelv1.CompleteCallRequest
}

func (k *completingKernel) completion(req *kernelv1.CompleteCallRequest) *kernelv1.CompleteCallResponse {
	k.mu.Lock()
	k.completed = append(k.completed, req)
	k.mu.Unlock()
	return &kernelv1.CompleteCallResponse{Call: &kernelv1.Call{
		CallId: req.GetCallId(), State: kernelv1.CallState_CALL_STATE_COMPLETED,
		Outcome: req.GetOutcome(), OutcomeDetail: req.GetOutcomeDetail(),
	}}
}

func (k *completingKernel) CompleteCall(_ context.Context, req *kernelv1.CompleteCallRequest) (*kernelv1.CompleteCallResponse, error) {
	k.unary.Add(1)
	return k.completion(req), nil
}

func (k *completingKernel) CompleteCalls(_ context.Context, req *kernelv1.CompleteCallsRequest) (*kernelv1.CompleteCallsResponse, error) {
	k.batches.Add(1)
	res := &kernelv1.CompleteCallsResponse{}
	for _, c := range req.GetCalls() {
		res.Results = append(res.Results, &kernelv1.CompleteCallResult{
			Result: &kernelv1.CompleteCallResult_Completed{Completed: k.completion(c)},
		})
	}
	return res, nil
}

// completeRPCs is how many CompleteCall and CompleteCalls RPCs the kernel saw.
func (k *completingKernel) completeRPCs() int { return int(k.unary.Load() + k.batches.Load()) }

// completingLedger answers every Write with CompletesCall as told.
type completingLedger struct {
	ledgerv1.UnimplementedLedgerServiceServer
	completesCall bool
	writes        atomic.Int32
}

func (l *completingLedger) Write(_ context.Context, req *ledgerv1.WriteRequest) (*ledgerv1.WriteResponse, error) {
	l.writes.Add(1)
	return &ledgerv1.WriteResponse{Entry: &ledgerv1.Entry{Key: req.GetKey()}, CompletesCall: l.completesCall}, nil
}

// startCompleting serves a completingKernel and a ledger answering
// completesCall on one loopback port, and returns a KernelClient to them.
func startCompleting(t *testing.T, completesCall bool, opts ...keycap.Option) (*keycap.KernelClient, *completingKernel, *completingLedger) {
	t.Helper()
	kernel, ledger := &completingKernel{}, &completingLedger{completesCall: completesCall}
	lis := listen(t)
	s := grpc.NewServer()
	kernelv1.RegisterKernelServiceServer(s, kernel)
	ledgerv1.RegisterLedgerServiceServer(s, ledger)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	addr := lis.Addr().String()
	return newFakeKernel(t, addr, addr, opts...), kernel, ledger
}

// writeAndComplete begins an Idempotent call, writes and completes it.
func writeAndComplete(t *testing.T, k *keycap.KernelClient, outcome keycap.Outcome, detail string) (*keycap.CapabilityHandle, *kernelv1.CompleteCallResponse) {
	t.Helper()
	h := begin(t, k, effectv1.EffectKind_EFFECT_KIND_IDEMPOTENT)
	if h.CompletedByWrite() {
		t.Fatal("CompletedByWrite before any write")
	}
	if _, err := h.Write(testContext(t), []byte("charged")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	res, err := h.Complete(testContext(t), outcome, detail)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	return h, res
}

func TestCompletesCallSuccessAfterACompletingWriteSendsNoCompleteCall(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []keycap.Option
	}{{"batching", nil}, {"WithoutBatching", []keycap.Option{keycap.WithoutBatching()}}} {
		t.Run(tc.name, func(t *testing.T) {
			k, kernel, ledger := startCompleting(t, true, tc.opts...)
			h, res := writeAndComplete(t, k, keycap.Succeeded, "")
			if !h.CompletedByWrite() {
				t.Fatal("CompletedByWrite is false after a write answered CompletesCall")
			}
			if n := kernel.completeRPCs(); n != 0 || ledger.writes.Load() != 1 {
				t.Fatalf("the kernel saw %d CompleteCall(s) RPCs and the ledger %d writes, want 0 and 1", n, ledger.writes.Load())
			}
			c := res.GetCall()
			if c.GetCallId() != h.CallID() || c.GetState() != kernelv1.CallState_CALL_STATE_COMPLETED ||
				c.GetOutcome() != kernelv1.CallOutcome_CALL_OUTCOME_SUCCEEDED || res.GetAlreadyCompleted() {
				t.Fatalf("local answer %v, want call %s COMPLETED SUCCEEDED, not already completed", res, h.CallID())
			}
			// The answer is a copy: the handle's call is as the kernel journaled it.
			if h.Call().GetState() == kernelv1.CallState_CALL_STATE_COMPLETED {
				t.Fatal("the local answer changed the handle's call")
			}
		})
	}
}

func TestCompletesCallFailureOrDetailIsStillSent(t *testing.T) {
	for _, tc := range []struct {
		outcome keycap.Outcome
		detail  string
	}{{keycap.Failed, ""}, {keycap.Failed, "card declined"}, {keycap.Succeeded, "charged 500"}} {
		t.Run(fmt.Sprintf("%d/%q", tc.outcome, tc.detail), func(t *testing.T) {
			k, kernel, _ := startCompleting(t, true)
			h, res := writeAndComplete(t, k, tc.outcome, tc.detail)
			if n := kernel.completeRPCs(); n != 1 {
				t.Fatalf("the kernel saw %d CompleteCall(s) RPCs, want 1", n)
			}
			kernel.mu.Lock()
			defer kernel.mu.Unlock()
			if len(kernel.completed) != 1 || kernel.completed[0].GetCallId() != h.CallID() || kernel.completed[0].GetOutcomeDetail() != tc.detail {
				t.Fatalf("CompleteCall requests %v, want one for %s with detail %q", kernel.completed, h.CallID(), tc.detail)
			}
			if res.GetCall().GetOutcomeDetail() != tc.detail {
				t.Fatalf("answer %v is not the kernel's", res)
			}
		})
	}
}

func TestCompletesCallSuccessAfterAWriteThatDoesNotCompleteTheCallIsSent(t *testing.T) {
	k, kernel, _ := startCompleting(t, false)
	h, _ := writeAndComplete(t, k, keycap.Succeeded, "")
	if h.CompletedByWrite() {
		t.Fatal("CompletedByWrite after a write that did not answer CompletesCall")
	}
	if n := kernel.completeRPCs(); n != 1 {
		t.Fatalf("the kernel saw %d CompleteCall(s) RPCs, want 1", n)
	}
}

func TestCompletesCallSuccessWithoutAWriteIsSent(t *testing.T) {
	k, kernel, _ := startCompleting(t, true)
	h := begin(t, k, effectv1.EffectKind_EFFECT_KIND_IDEMPOTENT)
	if _, err := h.Complete(testContext(t), keycap.Succeeded, ""); err != nil {
		t.Fatal(err)
	}
	if n := kernel.completeRPCs(); n != 1 {
		t.Fatalf("the kernel saw %d CompleteCall(s) RPCs, want 1", n)
	}
}

func TestCompletesCallConcurrentCompletingCallsSendNoCompleteCallsBatch(t *testing.T) {
	const calls = 32
	k, kernel, ledger := startCompleting(t, true)
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := 0; i < calls; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := testContext(t)
			h, err := k.Begin(ctx, effectv1.EffectKind_EFFECT_KIND_IDEMPOTENT.String(), map[string]any{"n": 1})
			if err == nil {
				_, err = h.Write(ctx, []byte("charged"))
			}
			if err == nil {
				_, err = h.Complete(ctx, keycap.Succeeded, "")
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := kernel.completeRPCs(); n != 0 || ledger.writes.Load() != calls {
		t.Fatalf("the kernel saw %d CompleteCall(s) RPCs and the ledger %d writes, want 0 and %d", n, ledger.writes.Load(), calls)
	}
}
