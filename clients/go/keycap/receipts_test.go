package keycap_test

// ADR 0035, the client's side: the ledger's completion receipts ride, each
// once and unchanged, on the client's later BeginCalls; without batching none
// is sent. In-process gRPC servers stand in for the kernel and the ledger.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	effectv1 "github.com/keycap/keycap/clients/go/gen/keycap/effect/v1"
	kernelv1 "github.com/keycap/keycap/clients/go/gen/keycap/kernel/v1"
	ledgerv1 "github.com/keycap/keycap/clients/go/gen/keycap/ledger/v1"
	"github.com/keycap/keycap/clients/go/keycap"
	"google.golang.org/grpc"
)

// receiptKernel answers BeginCall and BeginCalls slowly enough that concurrent
// begins queue into batches, and records the receipts each batch carried.
type receiptKernel struct {
	fakeKernel
	batches  atomic.Int32
	rmu      sync.Mutex
	receipts []string
}

func (k *receiptKernel) BeginCall(ctx context.Context, req *kernelv1.BeginCallRequest) (*kernelv1.BeginCallResponse, error) {
	time.Sleep(10 * time.Millisecond)
	return k.fakeKernel.BeginCall(ctx, req)
}

func (k *receiptKernel) BeginCalls(ctx context.Context, req *kernelv1.BeginCallsRequest) (*kernelv1.BeginCallsResponse, error) {
	k.batches.Add(1)
	k.rmu.Lock()
	for _, r := range req.GetReceipts() {
		k.receipts = append(k.receipts, fmt.Sprintf("%s@%d", r.GetCallId(), r.GetRecordedAtMs()))
	}
	k.rmu.Unlock()
	time.Sleep(10 * time.Millisecond)
	res := &kernelv1.BeginCallsResponse{}
	for _, c := range req.GetCalls() {
		begun, err := k.fakeKernel.BeginCall(ctx, c)
		if err != nil {
			return nil, err
		}
		res.Results = append(res.Results, &kernelv1.BeginCallResult{Result: &kernelv1.BeginCallResult_Begun{Begun: begun}})
	}
	return res, nil
}

// receiptLedger answers every Write as completing its call, with a receipt
// numbered by the write.
type receiptLedger struct {
	ledgerv1.UnimplementedLedgerServiceServer
	writes atomic.Int64
}

func (l *receiptLedger) Write(_ context.Context, req *ledgerv1.WriteRequest) (*ledgerv1.WriteResponse, error) {
	n := l.writes.Add(1)
	receipt := &effectv1.CompletionReceipt{CallId: "call-1", RecordedAtMs: n, Mac: make([]byte, 32)}
	return &ledgerv1.WriteResponse{Entry: &ledgerv1.Entry{Key: req.GetKey()}, CompletesCall: true, CompletionReceipt: receipt}, nil
}

func startReceipts(t *testing.T, opts ...keycap.Option) (*keycap.KernelClient, *receiptKernel) {
	t.Helper()
	kernel := &receiptKernel{}
	lis := listen(t)
	s := grpc.NewServer()
	kernelv1.RegisterKernelServiceServer(s, kernel)
	ledgerv1.RegisterLedgerServiceServer(s, &receiptLedger{})
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	addr := lis.Addr().String()
	return newFakeKernel(t, addr, addr, opts...), kernel
}

func beginAndWrite(t *testing.T, k *keycap.KernelClient, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := k.Begin(testContext(t), effectv1.EffectKind_EFFECT_KIND_IDEMPOTENT.String(), map[string]any{"n": 1})
			if err != nil {
				t.Errorf("Begin: %v", err)
				return
			}
			if _, err := h.Write(testContext(t), []byte("charged")); err != nil {
				t.Errorf("Write: %v", err)
			}
		}()
	}
	wg.Wait()
}

func TestReceiptsRideOnLaterBeginCalls(t *testing.T) {
	k, kernel := startReceipts(t)
	beginAndWrite(t, k, 32)
	beginAndWrite(t, k, 32)
	if kernel.batches.Load() == 0 {
		t.Fatal("no BeginCalls: the test's begins never queued into a batch")
	}
	kernel.rmu.Lock()
	defer kernel.rmu.Unlock()
	if len(kernel.receipts) == 0 {
		t.Fatal("no BeginCalls carried a receipt")
	}
	seen := map[string]bool{}
	for _, r := range kernel.receipts {
		if seen[r] {
			t.Fatalf("receipt %s rode twice", r)
		}
		seen[r] = true
	}
}

func TestReceiptsAreNotSentWithoutBatching(t *testing.T) {
	k, kernel := startReceipts(t, keycap.WithoutBatching())
	beginAndWrite(t, k, 8)
	if n := kernel.batches.Load(); n != 0 {
		t.Fatalf("%d BeginCalls without batching", n)
	}
}
