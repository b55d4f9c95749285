package main

// The example as a user runs it, against a real keycap stack: a tool begins
// calls with the Go client and charges through the protected service.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	paymentsv1 "github.com/keycap/keycap/clients/go/examples/payments/gen/payments/v1"
	"github.com/keycap/keycap/clients/go/internal/e2estack"
	"github.com/keycap/keycap/clients/go/keycap"
	"github.com/keycap/keycap/clients/go/sink"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

var stack *e2estack.Stack

func TestMain(m *testing.M) {
	s, err := e2estack.Start(e2estack.StartTimeout())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stack = s
	code := m.Run()
	s.Stop()
	os.Exit(code)
}

func TestChargesOncePerCapabilityKeyAndRefusesWithoutACapability(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, closeSink, err := newSink(ctx, config{kernel: stack.Kernel, mongoURI: stack.MongoDBURI, database: stack.MongoDBDatabase})
	if err != nil {
		t.Fatal(err)
	}
	defer closeSink()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(s)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	payments := paymentsv1.NewPaymentsServiceClient(conn)

	kernel, err := keycap.NewKernelClient(stack.Kernel, keycap.WithToken(stack.RuntimeToken))
	if err != nil {
		t.Fatal(err)
	}
	defer kernel.Close()
	if _, err := kernel.RegisterTool(ctx, keycap.Tool{ID: ChargeTool, Effect: keycap.Idempotent(keycap.KeyDerivation{Fields: []string{"/order_id"}})}); err != nil {
		t.Fatal(err)
	}
	charge := func(order string, cents int64) (*paymentsv1.ChargeResponse, error) {
		args, _ := json.Marshal(map[string]any{"order_id": order, "cents": cents})
		begun, err := kernel.BeginCall(ctx, ChargeTool, string(args))
		if err != nil {
			t.Fatal(err)
		}
		callCtx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+begun.GetCapability())
		return payments.Charge(callCtx, &paymentsv1.ChargeRequest{OrderId: order, Cents: cents})
	}

	order := fmt.Sprintf("o-%d", time.Now().UnixNano())
	first, err := charge(order, 500)
	if err != nil || first.GetDuplicate() || first.GetChargeId() == "" {
		t.Fatalf("first charge: %v %v", first, err)
	}
	// The agent retries the same order in a new call: same kernel-derived key, no second charge.
	again, err := charge(order, 500)
	if err != nil || !again.GetDuplicate() || again.GetChargeId() != first.GetChargeId() {
		t.Fatalf("retry: %v %v", again, err)
	}
	other, err := charge(order+"-b", 700)
	if err != nil || other.GetDuplicate() || other.GetChargeId() == first.GetChargeId() {
		t.Fatalf("another order: %v %v", other, err)
	}

	_, err = payments.Charge(ctx, &paymentsv1.ChargeRequest{OrderId: order, Cents: 500})
	if kerr := keycap.FromError(err); kerr == nil || kerr.Code != codes.Unauthenticated || kerr.Reason != sink.ReasonCapabilityMissing {
		t.Fatalf("without a capability: %v", err)
	}
}
