package main

// The acceptance of issue 29 for Go, against a real kernel and the real
// gateway: the example behind `keycap mcp` charges once under the kernel's key;
// the same server reached directly refuses every call that does not carry a
// capability for exactly it, before the handler runs, and each refusal is in
// `keycap rejections --service sink:<name>`.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap/clients/go/examples/mcpcharge/chargeserver"
	"github.com/keycap/keycap/clients/go/internal/e2estack"
	"github.com/keycap/keycap/clients/go/keycap"
	"github.com/keycap/keycap/clients/go/keyderive"
	"github.com/keycap/keycap/clients/go/mcpsink"
	"github.com/keycap/keycap/clients/go/sink"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

var (
	stack *e2estack.Stack
	db    *mongo.Database
)

func TestMain(m *testing.M) {
	s, err := e2estack.Start(e2estack.StartTimeout())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stack = s
	client, err := mongo.Connect(options.Client().ApplyURI(s.MongoDBURI))
	if err != nil {
		s.Stop()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	db = client.Database(s.MongoDBDatabase)
	code := m.Run()
	_ = client.Disconnect(context.Background())
	s.Stop()
	os.Exit(code)
}

const chargeArgs = `{"order_id":"o-1","amount_cents":500}`

func TestChargesOnceThroughTheGatewayAndRefusesDirectCallsWithoutTheirCapability(t *testing.T) {
	ctx := context.Background()
	name := "gopay-" + suffix()
	chargeID, receiptID := mcpsink.ToolID(name, chargeserver.ChargeTool), mcpsink.ToolID(name, chargeserver.ReceiptTool)

	// Through the gateway: the kernel keys the call, the example charges under that key.
	api := newPaymentsAPI(t)
	host := startGateway(t, name, buildExample(t), api.URL)
	var key string
	for i := range 2 {
		res, err := host.CallTool(ctx, &mcp.CallToolParams{Name: "charge", Arguments: json.RawMessage(chargeArgs)})
		if err != nil || res.IsError {
			t.Fatalf("charge through the gateway (%d): %v %+v", i, err, res)
		}
		key, _ = res.Meta[mcpsink.MetaIdempotencyKey].(string)
	}
	want, err := keyderive.Key(chargeID, keyderive.Derivation{Fields: []string{"/order_id", "/amount_cents"}}, []byte(chargeArgs), keyderive.Context{})
	if err != nil {
		t.Fatal(err)
	}
	requests, keys, charges := api.snapshot()
	if key != want || requests != 1 || charges != 1 || keys[0] != want {
		t.Fatalf("gateway key %q (Go derives %q); the API saw %d requests, keys %v, %d charges; want one, under the kernel's key", key, want, requests, keys, charges)
	}

	// Directly: the same server, in process, with a handler counter and a clock the test can move.
	direct := newDirectServer(t, name)
	kernel, err := keycap.NewKernelClient(stack.Kernel, keycap.WithToken(stack.RuntimeToken))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kernel.Close() })
	begin := func(tool, args string) string {
		res, err := kernel.BeginCall(ctx, tool, args)
		if err != nil {
			t.Fatalf("BeginCall %s: %v", tool, err)
		}
		return res.GetCapability()
	}
	otherArgs := begin(chargeID, `{"order_id":"o-2","amount_cents":700}`)
	expiring := begin(chargeID, `{"order_id":"o-1","amount_cents":500,"note":"expired"}`)
	receipt := begin(receiptID, `{"to":"a@example.com","order_id":"o-1"}`)

	direct.expect(t, "charge", chargeArgs, nil, sink.ReasonCapabilityMissing, chargeID)
	direct.expect(t, "charge", chargeArgs, meta(otherArgs), sink.ReasonKeyMismatch, chargeID)
	direct.offset.Store(int64(30 * time.Minute))
	direct.expect(t, "charge", chargeArgs, meta(expiring), sink.ReasonExpired, chargeID)
	direct.offset.Store(0)
	direct.expect(t, "charge", chargeArgs, meta(receipt), sink.ReasonToolNotAccepted, chargeID)
	receiptArgs := `{"to":"a@example.com","order_id":"o-1"}`
	if res, err := direct.session.CallTool(ctx, &mcp.CallToolParams{Meta: meta(receipt), Name: "send_receipt", Arguments: json.RawMessage(receiptArgs)}); err != nil || res.IsError {
		t.Fatalf("the receipt's first use: %v %+v", err, res)
	}
	direct.expect(t, "send_receipt", receiptArgs, meta(receipt), sink.ReasonCapabilityReused, receiptID)

	if n, r := direct.calls[chargeserver.ChargeTool].Load(), direct.calls[chargeserver.ReceiptTool].Load(); n != 0 || r != 1 {
		t.Fatalf("handlers ran: charge %d (want 0), send_receipt %d (want 1, its first use)", n, r)
	}
	if requests, _, charges := direct.api.snapshot(); requests != 1 || charges != 0 {
		t.Fatalf("the API behind the direct server saw %d requests, %d charges; want the one receipt", requests, charges)
	}

	got := map[string]string{}
	for _, row := range rejections(t, "sink:"+name) {
		got[row.Reason] = row.ToolID
	}
	for reason, tool := range map[string]string{
		sink.ReasonCapabilityMissing: chargeID, sink.ReasonKeyMismatch: chargeID, sink.ReasonExpired: chargeID,
		sink.ReasonToolNotAccepted: chargeID, sink.ReasonCapabilityReused: receiptID,
	} {
		if got[reason] != tool {
			t.Errorf("keycap rejections --service sink:%s: %s recorded against %q, want %q (all: %v)", name, reason, got[reason], tool, got)
		}
	}
}

// directServer is the example's server reached without the gateway.
type directServer struct {
	session *mcp.ClientSession
	api     *paymentsAPI
	calls   map[string]*atomic.Int64
	offset  atomic.Int64 // added to the guard's clock
}

func newDirectServer(t *testing.T, name string) *directServer {
	t.Helper()
	ctx := context.Background()
	d := &directServer{api: newPaymentsAPI(t), calls: map[string]*atomic.Int64{chargeserver.ChargeTool: {}, chargeserver.ReceiptTool: {}}}
	conn, err := grpc.NewClient(stack.Kernel, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	spent, err := sink.OpenMongoSpentStore(ctx, db, sink.MongoSpentStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(spent.Close)
	rec, err := sink.OpenMongoRecorder(ctx, db, name, sink.MongoRecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close(context.Background()) })
	guard, err := mcpsink.New(mcpsink.Options{
		Name: name, Tools: map[string]string{chargeserver.ChargeTool: "", chargeserver.ReceiptTool: ""},
		Keys:       sink.NewKernelKeys(conn, sink.KernelKeysOptions{}),
		Verifier:   sink.VerifierOptions{Now: func() time.Time { return time.Now().Add(time.Duration(d.offset.Load())) }},
		SpentStore: spent, Recorder: rec,
	})
	if err != nil {
		t.Fatal(err)
	}
	server := chargeserver.New(chargeserver.Options{Guard: guard, API: d.api.URL, OnCall: func(tool string) { d.calls[tool].Add(1) }})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	d.session, err = mcp.NewClient(&mcp.Implementation{Name: "direct-host", Version: "1.0.0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.session.Close() })
	return d
}

// expect sends a call and wants keycap's refusal for toolID as a JSON-RPC error.
func (d *directServer) expect(t *testing.T, tool, args string, m mcp.Meta, reason, toolID string) {
	t.Helper()
	_, err := d.session.CallTool(context.Background(), &mcp.CallToolParams{Meta: m, Name: tool, Arguments: json.RawMessage(args)})
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) {
		t.Fatalf("%s: want %s, got %v", tool, reason, err)
	}
	var data mcpsink.ErrorData
	_ = json.Unmarshal(werr.Data, &data)
	if data.Reason != reason || data.ToolID != toolID {
		t.Fatalf("%s: got %+v (%s), want %s for %s", tool, data, werr.Message, reason, toolID)
	}
}

func meta(capability string) mcp.Meta { return mcp.Meta{mcpsink.MetaCapability: capability} }
