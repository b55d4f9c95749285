package mcpsink

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/keycap/keycap/clients/go/sink"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The `_meta` keys the gateway sets on a governed tools/call
// (services/mcp/src/meta-keys.ts).
const (
	MetaCapability     = "io.keycap/capability"
	MetaIdempotencyKey = "io.keycap/idempotency-key"
	MetaRequestID      = "io.keycap/request-id"
	MetaCallID         = "io.keycap/call-id"
)

const methodCallTool = "tools/call"

// Options configures New.
type Options struct {
	// Name is the server's name as keycap knows it: refusals are recorded as
	// service "sink:<Name>" (1-63 of [a-z0-9._-]). Required.
	Name string
	// Upstream is the name the gateway's policy gives this server, used for the
	// default tool ids. Default Name.
	Upstream string
	// Tools marks the governed tools: MCP tool name → keycap tool id, where ""
	// is the gateway's id for it, "mcp:<Upstream>/<tool>". Tools not named
	// here pass through unchecked. Required, non-empty.
	Tools map[string]string
	// Keys are the kernel's public keys (sink.NewKernelKeys, sink.NewStaticKeys). Required.
	Keys sink.KeySource
	// Verifier holds the ledger's verification options; zero values are its defaults.
	Verifier sink.VerifierOptions
	// SpentStore spends Unsafe and Queryable capabilities once; without it
	// only Idempotent tools can be governed (EFFECT_CLASS_MISMATCH otherwise).
	SpentStore sink.SpentStore
	// Recorder is keycap's refusal store (sink.OpenMongoRecorder).
	Recorder sink.Recorder
	// OnRefusal is called for every refusal, after it is recorded.
	OnRefusal func(sink.RefusalEvent)
}

// Guard checks governed tools/call requests; install Middleware on the server.
type Guard struct {
	sink  *sink.Sink
	tools map[string]string
}

// ToolID is the kernel tool id the gateway registers for an upstream's tool.
func ToolID(upstream, tool string) string { return "mcp:" + upstream + "/" + tool }

// New checks the options and builds the guard.
func New(opts Options) (*Guard, error) {
	if len(opts.Tools) == 0 {
		return nil, errors.New("mcpsink: name the governed tools (Tools)")
	}
	upstream := opts.Upstream
	if upstream == "" {
		upstream = opts.Name
	}
	tools := make(map[string]string, len(opts.Tools))
	ids := make([]string, 0, len(opts.Tools))
	for name, id := range opts.Tools {
		if id == "" {
			id = ToolID(upstream, name)
		}
		tools[name] = id
		ids = append(ids, id)
	}
	sort.Strings(ids)
	s, err := sink.New(sink.Options{
		Name: opts.Name, Tools: ids, Keys: opts.Keys, Verifier: opts.Verifier,
		SpentStore: opts.SpentStore, Recorder: opts.Recorder, OnRefusal: opts.OnRefusal,
	})
	if err != nil {
		return nil, fmt.Errorf("mcpsink: %w", err)
	}
	return &Guard{sink: s, tools: tools}, nil
}

// ToolID is the keycap tool id of a governed MCP tool.
func (g *Guard) ToolID(mcpTool string) (string, bool) {
	id, ok := g.tools[mcpTool]
	return id, ok
}

// Service is the refusal records' service, "sink:<name>".
func (g *Guard) Service() string { return g.sink.Service() }

// Middleware is receiving middleware for mcp.Server.AddReceivingMiddleware.
// Install it first, so nothing runs for a refused call.
func (g *Guard) Middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != methodCallTool {
			return next(ctx, method, req)
		}
		call, ok := req.(*mcp.CallToolRequest)
		if !ok || call.Params == nil {
			return next(ctx, method, req)
		}
		toolID, governed := g.tools[call.Params.Name]
		if !governed {
			return next(ctx, method, req)
		}
		c, err := g.Admit(ctx, call.Params)
		if err != nil {
			return nil, ToJSONRPCError(err, toolID)
		}
		return next(withCapability(ctx, c), method, req)
	}
}

// Admit runs the checks on one governed call's params; the error is a
// *sink.Refusal, already recorded. Middleware calls it; it is exported for
// servers that dispatch tools/call themselves.
func (g *Guard) Admit(ctx context.Context, p *mcp.CallToolParamsRaw) (*sink.Capability, error) {
	toolID, governed := g.tools[p.Name]
	if !governed {
		return nil, fmt.Errorf("mcpsink: tool %q is not governed", p.Name)
	}
	return g.sink.AdmitCall(ctx, request(p), sink.Call{ToolID: toolID, Arguments: p.Arguments})
}

// request is what the call says about its capability, in the sink's terms.
func request(p *mcp.CallToolParamsRaw) sink.Request {
	req := sink.Request{Method: "MCP tools/call " + p.Name}
	meta := p.GetMeta()
	// Absent and null alike: no capability. (The TypeScript sink reads _meta the same way.)
	if v := meta[MetaCapability]; v != nil {
		token, isString := v.(string)
		switch {
		case !isString:
			// Not a compact JWS at all: malformed, never "missing".
			req.Authorization = []string{"\x00"}
		case strings.TrimSpace(token) == "":
			// Blank: the verifier calls that missing, as it does a blank header.
			req.Authorization = []string{token}
		default:
			// _meta carries the bare token; the verifier reads a Bearer value.
			req.Authorization = []string{"Bearer " + token}
		}
	}
	// Only a string is a key to compare; the capability's own key is bound anyway.
	if key, ok := meta[MetaIdempotencyKey].(string); ok {
		req.IdempotencyKey, req.HasIdempotencyKey = key, true
	}
	return req
}
