package keycap_test

// ADR 0037, the Go client's side: a LedgerClient WithBatchedWrites sends the
// writes made while one is in flight as one Writes, each item with its own
// capability and the batch with no bearer, each answered as if alone; a
// single-use write and a large payload always go alone; a ledger without
// Writes (older) is asked once, then written to one Write at a time. An
// in-process gRPC server stands in for the ledger.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ledgerv1 "github.com/keycap/keycap/clients/go/gen/keycap/ledger/v1"
	"github.com/keycap/keycap/clients/go/keycap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// batchLedger answers a write when its capability is "cap-<key>", slowly
// enough that concurrent writes queue into batches; it counts both RPCs.
type batchLedger struct {
	ledgerv1.UnimplementedLedgerServiceServer
	noBatch       bool
	write, writes atomic.Int32
	mu            sync.Mutex
	batchBearers  []string
}

func (l *batchLedger) answer(capability string, req *ledgerv1.WriteRequest) (*ledgerv1.WriteResponse, error) {
	if capability != "cap-"+req.GetKey() {
		return nil, keyMismatch(req.GetKey())
	}
	return &ledgerv1.WriteResponse{Entry: &ledgerv1.Entry{Key: req.GetKey(), CallId: strings.TrimPrefix(req.GetKey(), "k-")}}, nil
}

func (l *batchLedger) Write(ctx context.Context, req *ledgerv1.WriteRequest) (*ledgerv1.WriteResponse, error) {
	l.write.Add(1)
	time.Sleep(10 * time.Millisecond)
	md, _ := metadata.FromIncomingContext(ctx)
	return l.answer(strings.TrimPrefix(strings.Join(md.Get("authorization"), ","), "Bearer "), req)
}

func (l *batchLedger) Writes(ctx context.Context, req *ledgerv1.WritesRequest) (*ledgerv1.WritesResponse, error) {
	l.writes.Add(1)
	if l.noBatch {
		return nil, status.Error(codes.Unimplemented, "unknown method Writes")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	l.mu.Lock()
	l.batchBearers = append(l.batchBearers, md.Get("authorization")...)
	l.mu.Unlock()
	time.Sleep(10 * time.Millisecond)
	res := &ledgerv1.WritesResponse{}
	for _, w := range req.GetWrites() {
		written, err := l.answer(w.GetCapability(), w.GetWrite())
		if err != nil {
			raw, merr := proto.Marshal(status.Convert(err).Proto())
			if merr != nil {
				return nil, merr
			}
			res.Results = append(res.Results, &ledgerv1.WriteResult{Result: &ledgerv1.WriteResult_ErrorStatus{ErrorStatus: raw}})
			continue
		}
		res.Results = append(res.Results, &ledgerv1.WriteResult{Result: &ledgerv1.WriteResult_Written{Written: written}})
	}
	return res, nil
}

// keyMismatch is the ledger's refusal of a capability that does not grant the key.
func keyMismatch(key string) error {
	st, err := status.New(codes.PermissionDenied, "the capability does not grant key "+key).
		WithDetails(&errdetails.ErrorInfo{Reason: "KEY_MISMATCH", Domain: keycap.Domain})
	if err != nil {
		return err
	}
	return st.Err()
}

func startBatchLedger(t *testing.T, l *batchLedger, opts ...keycap.Option) *keycap.LedgerClient {
	t.Helper()
	lis := listen(t)
	s := grpc.NewServer()
	ledgerv1.RegisterLedgerServiceServer(s, l)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	c, err := keycap.NewLedgerClient(lis.Addr().String(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// writeConcurrently writes n keys at once, key i under "cap-k-i" except those
// forged says; it returns each write's error.
func writeConcurrently(t *testing.T, c *keycap.LedgerClient, n int, payload []byte, once bool, forged func(int) bool) []error {
	t.Helper()
	ctx := testContext(t)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("k-%d", i)
			capability := "cap-" + key
			if forged != nil && forged(i) {
				capability = "cap-someone-else"
			}
			req := &ledgerv1.WriteRequest{Key: key, Payload: payload}
			var res *ledgerv1.WriteResponse
			var err error
			if once {
				res, err = c.WriteWithCapabilityOnce(ctx, capability, req)
			} else {
				res, err = c.WriteWithCapability(ctx, capability, req)
			}
			if err == nil && res.GetEntry().GetKey() != key {
				err = fmt.Errorf("write of %s answered with the entry of %s", key, res.GetEntry().GetKey())
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	return errs
}

func TestBatchedWritesCarryEachCapabilityAndAnswerEachAlone(t *testing.T) {
	l := &batchLedger{}
	c := startBatchLedger(t, l, keycap.WithBatchedWrites())
	errs := writeConcurrently(t, c, 48, []byte("p"), false, func(i int) bool { return i%8 == 7 })
	for i, err := range errs {
		if i%8 == 7 {
			requireRefusal(t, err, codes.PermissionDenied, "KEY_MISMATCH")
		} else if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if l.writes.Load() == 0 || l.write.Load() >= 48 {
		t.Fatalf("48 concurrent writes were not batched: Write %d, Writes %d", l.write.Load(), l.writes.Load())
	}
	if len(l.batchBearers) != 0 {
		t.Fatalf("a Writes batch carried a bearer: %v", l.batchBearers)
	}
}

func TestSingleUseAndLargeWritesAndUnbatchedClientsGoAlone(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []keycap.Option
		payload []byte
		once    bool
	}{
		{"single-use", []keycap.Option{keycap.WithBatchedWrites()}, []byte("p"), true},
		{"payload above 16 KiB", []keycap.Option{keycap.WithBatchedWrites()}, make([]byte, 16*1024+1), false},
		{"without WithBatchedWrites", nil, []byte("p"), false},
		{"WithoutBatching wins", []keycap.Option{keycap.WithBatchedWrites(), keycap.WithoutBatching()}, []byte("p"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &batchLedger{}
			c := startBatchLedger(t, l, tc.opts...)
			for i, err := range writeConcurrently(t, c, 20, tc.payload, tc.once, nil) {
				if err != nil {
					t.Fatalf("write %d: %v", i, err)
				}
			}
			if l.writes.Load() != 0 || l.write.Load() != 20 {
				t.Fatalf("Write %d, Writes %d; want 20, 0", l.write.Load(), l.writes.Load())
			}
		})
	}
}

func TestAnOlderLedgerIsAskedForWritesOnceThenWrittenOneByOne(t *testing.T) {
	l := &batchLedger{noBatch: true}
	c := startBatchLedger(t, l, keycap.WithBatchedWrites())
	for round := range 2 {
		for i, err := range writeConcurrently(t, c, 20, []byte("p"), false, nil) {
			if err != nil {
				t.Fatalf("round %d, write %d: %v", round, i, err)
			}
		}
	}
	if l.writes.Load() != 1 {
		t.Fatalf("Writes asked %d times; want once", l.writes.Load())
	}
	if l.write.Load() != 40 {
		t.Fatalf("Write %d; want 40", l.write.Load())
	}
}
