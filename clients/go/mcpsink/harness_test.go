package mcpsink_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/keycap/keycap/clients/go/mcpsink"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// testServer is an MCP server with the guard installed and a counter per
// tool handler: a refusal must leave its tool's counter where it was.
type testServer struct {
	session *mcp.ClientSession
	calls   map[string]*atomic.Int64
	// keys are what the handlers read with KeyFrom, in call order.
	keys chan string
}

// serve builds a server offering tools (all of them counted, those the
// guard governs checked) and connects an in-memory client session to it.
func serve(t *testing.T, guard *mcpsink.Guard, tools ...string) *testServer {
	t.Helper()
	ts := &testServer{calls: map[string]*atomic.Int64{}, keys: make(chan string, 100)}
	server := mcp.NewServer(&mcp.Implementation{Name: "test-server", Version: "1.0.0"}, nil)
	server.AddReceivingMiddleware(guard.Middleware)
	for _, name := range tools {
		n := &atomic.Int64{}
		ts.calls[name] = n
		server.AddTool(&mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}},
			func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				n.Add(1)
				key, _ := mcpsink.KeyFrom(ctx)
				ts.keys <- key
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
			})
	}
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	client := mcp.NewClient(&mcp.Implementation{Name: "test-host", Version: "1.0.0"}, nil)
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	ts.session = cs
	return ts
}

// call sends tools/call with the arguments as exact JSON text and _meta.
func (ts *testServer) call(tool, args string, meta mcp.Meta) (*mcp.CallToolResult, error) {
	return ts.session.CallTool(context.Background(), &mcp.CallToolParams{Meta: meta, Name: tool, Arguments: json.RawMessage(args)})
}

// refusal is the keycap refusal a call got, or fails the test.
func refusal(t *testing.T, err error) (int64, mcpsink.ErrorData) {
	t.Helper()
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) {
		t.Fatalf("want a JSON-RPC error carrying keycap's reason, got %v", err)
	}
	var data mcpsink.ErrorData
	if err := json.Unmarshal(werr.Data, &data); err != nil {
		t.Fatalf("error data %s: %v", werr.Data, err)
	}
	return werr.Code, data
}

func withCapability(token string) mcp.Meta { return mcp.Meta{mcpsink.MetaCapability: token} }
