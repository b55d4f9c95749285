package keycap_test

// Issue 33 (ADR 0022 for Go) and ADR 0037: concurrent Begin, Write and
// Complete calls of one client travel in BeginCalls / Writes / CompleteCalls
// batches against the real kernel and ledger, each answered as if it had been
// sent alone (a refused call among them gets its own refusal, a write its own
// entry); WithoutBatching sends one RPC per call. The RPCs are
// counted by a client interceptor.

import (
	"context"
	"fmt"
	"path"
	"sync"
	"testing"

	ledgerv1 "github.com/keycap/keycap/clients/go/gen/keycap/ledger/v1"
	"github.com/keycap/keycap/clients/go/keycap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// rpcCounter counts the unary RPCs a client sends, by method name.
type rpcCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *rpcCounter) option() keycap.Option {
	return keycap.WithDialOptions(grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		r.mu.Lock()
		r.n[path.Base(method)]++
		r.mu.Unlock()
		return invoker(ctx, method, req, reply, cc, opts...)
	}))
}

// runConcurrentCalls starts n whole calls at once through one client; every
// eighth names a tool that does not exist. It returns each call's error.
func runConcurrentCalls(t *testing.T, tool string, n int, opts ...keycap.Option) ([]error, map[string]int) {
	t.Helper()
	ctx := testContext(t)
	counter := &rpcCounter{n: map[string]int{}}
	k, err := keycap.NewKernelClient(stack.Kernel, append([]keycap.Option{keycap.WithLedger(stack.Ledger), keycap.WithToken(stack.RuntimeToken), counter.option()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			id := tool
			if i%8 == 7 {
				id = tool + ".missing"
			}
			h, err := k.Begin(ctx, id, map[string]any{"order_id": uniqueID("co")})
			if err == nil {
				var w *ledgerv1.WriteResponse
				if w, err = h.Write(ctx, []byte("charged")); err == nil && (w.GetEntry().GetCallId() != h.CallID() || w.GetDuplicate()) {
					err = fmt.Errorf("write of call %s answered with entry of call %s (duplicate %v)", h.CallID(), w.GetEntry().GetCallId(), w.GetDuplicate())
				}
			}
			if err == nil {
				_, err = h.Complete(ctx, keycap.Succeeded, "charged")
			}
			errs[i] = err
		}()
	}
	close(start)
	wg.Wait()
	return errs, counter.n
}

func TestConcurrentCallsTravelInBatchesEachAnsweredAsAlone(t *testing.T) {
	ctx := testContext(t)
	c := newClients(t)
	tool := registerCharge(t, ctx, c.kernel, "go.coalesce")
	const n = 64
	for _, tc := range []struct {
		name    string
		opts    []keycap.Option
		batched bool
	}{{"batched by default", nil, true}, {"WithoutBatching", []keycap.Option{keycap.WithoutBatching()}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			errs, rpcs := runConcurrentCalls(t, tool, n, tc.opts...)
			for i, err := range errs {
				if i%8 == 7 {
					requireRefusal(t, err, codes.NotFound, "TOOL_NOT_FOUND")
				} else if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			written := n - n/8
			if tc.batched && (rpcs["BeginCalls"] == 0 || rpcs["CompleteCalls"] == 0 || rpcs["BeginCall"] >= n || rpcs["Writes"] == 0 || rpcs["Write"] >= written) {
				t.Fatalf("%d concurrent calls were not batched: %v", n, rpcs)
			}
			if !tc.batched && (rpcs["BeginCalls"] != 0 || rpcs["CompleteCalls"] != 0 || rpcs["BeginCall"] != n || rpcs["Writes"] != 0 || rpcs["Write"] != written) {
				t.Fatalf("WithoutBatching sent batches: %v", rpcs)
			}
			t.Logf("%s: %v", tc.name, rpcs)
		})
	}
}
