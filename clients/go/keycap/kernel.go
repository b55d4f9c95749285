package keycap

import (
	"context"
	"errors"
	"time"

	"crypto/rand"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/codes"

	kernelv1 "github.com/keycap/keycap/clients/go/gen/keycap/kernel/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Outcome is how a call ended, reported to CompleteCall.
type Outcome int

const (
	// Succeeded: the tool did what it was asked.
	Succeeded Outcome = iota + 1
	// Failed: the tool failed and will not be retried.
	Failed
)

func (o Outcome) proto() kernelv1.CallOutcome {
	switch o {
	case Succeeded:
		return kernelv1.CallOutcome_CALL_OUTCOME_SUCCEEDED
	case Failed:
		return kernelv1.CallOutcome_CALL_OUTCOME_FAILED
	default:
		return kernelv1.CallOutcome_CALL_OUTCOME_UNSPECIFIED
	}
}

// BeginOption configures Begin and BeginCall.
type BeginOption func(*kernelv1.BeginCallRequest)

// WithCallID sets a caller-chosen call id: beginning it again with the same
// arguments returns the same call.
func WithCallID(id string) BeginOption {
	return func(r *kernelv1.BeginCallRequest) { r.CallId = id }
}

// WithRunID sets the agent run the call belongs to (it enters the key when the
// tool's derivation sets RunID).
func WithRunID(id string) BeginOption {
	return func(r *kernelv1.BeginCallRequest) { r.RunId = id }
}

// KernelClient is the typed client of keycap.kernel.v1.KernelService, used by
// agent runtimes. Every call presents the principal's credential (WithToken,
// else RuntimeTokenFromEnv; or a TLS client certificate). Safe for concurrent
// use. Close it when done.
type KernelClient struct {
	conn   *grpc.ClientConn
	raw    kernelv1.KernelServiceClient
	ledger *LedgerClient
	o      options
	// Concurrent begins and completes travel together (ADR 0022); nil with
	// WithoutBatching.
	begins    *coalescer[*kernelv1.BeginCallRequest, *kernelv1.BeginCallResponse]
	completes *coalescer[*kernelv1.CompleteCallRequest, *kernelv1.CompleteCallResponse]
	// The ledger's completion receipts for the next BeginCalls (ADR 0035).
	receipts receipts
}

// NewKernelClient connects (lazily) to the kernel at address. Pass WithLedger
// so that handles from Begin and Resume can write. The bearer token is
// WithToken's, else the default lookup's (RuntimeTokenFromEnv, whose
// *ConfigError is returned here); without one the kernel refuses every call
// with UNAUTHENTICATED PRINCIPAL_CREDENTIAL_MISSING unless a mapped TLS client
// certificate proves the principal.
func NewKernelClient(address string, opts ...Option) (*KernelClient, error) {
	o := buildOptions(opts)
	token := o.token
	if !o.tokenSet {
		var err error
		if token, err = RuntimeTokenFromEnv(); err != nil {
			return nil, err
		}
	}
	conn, err := dial(address, o, append(withBearer(token), explainErrors(kernelService, address, o, token != ""))...)
	if err != nil {
		return nil, err
	}
	c := &KernelClient{conn: conn, raw: kernelv1.NewKernelServiceClient(conn), o: o}
	if !o.noBatching {
		c.begins, c.completes = c.beginCoalescer(), c.completeCoalescer()
	}
	if o.ledgerAddress != "" {
		if c.ledger, err = NewLedgerClient(o.ledgerAddress, append(opts[:len(opts):len(opts)], WithBatchedWrites())...); err != nil {
			_ = conn.Close()
			return nil, err
		}
	}
	return c, nil
}

// Raw is the generated client, for RPCs in their wire form; its calls carry the
// bearer token too. Its errors are plain gRPC status errors; FromError reads them.
// Its calls are sent as it sends them: no request rules checked, no default
// deadline, no wait for the kernel to be ready, no resend of UNAVAILABLE.
func (c *KernelClient) Raw() kernelv1.KernelServiceClient { return c.raw }

// Close closes the kernel connection and the ledger connection, if any.
func (c *KernelClient) Close() error {
	err := c.conn.Close()
	if c.ledger != nil {
		err = errors.Join(err, c.ledger.Close())
	}
	return err
}

// RegisterTool registers a tool; the same definition again is a no-op
// (AlreadyRegistered), another definition under the same id is refused with
// ALREADY_EXISTS. A tool that breaks a request rule written in proto/ is
// refused before sending with INVALID_ARGUMENT and the kernel's reason for it
// (see Tool.Validate).
func (c *KernelClient) RegisterTool(ctx context.Context, t Tool) (*kernelv1.RegisterToolResponse, error) {
	return c.RegisterToolProto(ctx, t.Proto())
}

// RegisterToolProto registers a tool given in its wire form, checked against
// the request rules before sending as RegisterTool's is (nil is refused
// TOOL_REQUIRED). Raw().RegisterTool sends it unchecked.
func (c *KernelClient) RegisterToolProto(ctx context.Context, t *kernelv1.Tool) (*kernelv1.RegisterToolResponse, error) {
	return invoke(ctx, c.o.callTimeout, "", c.raw.RegisterTool, &kernelv1.RegisterToolRequest{Tool: t})
}

// GetTool reads one tool; NOT_FOUND when unknown.
func (c *KernelClient) GetTool(ctx context.Context, toolID string) (*kernelv1.Tool, error) {
	res, err := invoke(ctx, c.o.callTimeout, "", c.raw.GetTool, &kernelv1.GetToolRequest{ToolId: toolID})
	if err != nil {
		return nil, err
	}
	return res.GetTool(), nil
}

// ListTools returns every registered tool, ordered by id.
func (c *KernelClient) ListTools(ctx context.Context) ([]*kernelv1.Tool, error) {
	var out []*kernelv1.Tool
	token := ""
	for {
		res, err := invoke(ctx, c.o.callTimeout, "", c.raw.ListTools, &kernelv1.ListToolsRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			return nil, err
		}
		out = append(out, res.GetTools()...)
		if token = res.GetNextPageToken(); token == "" {
			return out, nil
		}
	}
}

// BeginCall is BeginCall in its wire form: argumentsJSON is sent exactly as
// given, and the response carries the raw capability (and, in a replay, the
// recorded call it matched). Tools should use Begin.
func (c *KernelClient) BeginCall(ctx context.Context, toolID string, argumentsJSON string, opts ...BeginOption) (*kernelv1.BeginCallResponse, error) {
	req, err := c.beginRequest(toolID, argumentsJSON, opts)
	if err != nil {
		return nil, err
	}
	if c.begins == nil {
		return invoke(ctx, c.o.callTimeout, "", c.raw.BeginCall, req)
	}
	// Checked here, so a request that breaks a rule is refused alone and not sent, batch or not.
	if refusal := checkRequest(req); refusal != nil {
		return nil, refusal
	}
	return c.begins.submit(ctx, req)
}

// beginRequest is the BeginCallRequest of one call: the client's run mode,
// then opts, a call id chosen here when none is given.
func (c *KernelClient) beginRequest(toolID, argumentsJSON string, opts []BeginOption) (*kernelv1.BeginCallRequest, error) {
	req := &kernelv1.BeginCallRequest{ToolId: toolID, ArgumentsJson: argumentsJSON}
	c.o.runMode.apply(req)
	for _, opt := range opts {
		opt(req)
	}
	// Go strings may hold any bytes: ill-formed UTF-8 is refused here with a
	// reason instead of failing in the marshaller (or being replaced by U+FFFD).
	for field, text := range map[string]string{"arguments_json": req.ArgumentsJson, "run_id": req.RunId} {
		if !utf8.ValidString(text) {
			return nil, &Error{
				Code: codes.InvalidArgument, Reason: "INVALID_UTF8", Domain: ClientDomain, Metadata: map[string]string{"field": field},
				Message: field + " is not well-formed UTF-8 (not sent)",
			}
		}
	}
	// The call id is chosen here, not by the kernel, so that a BeginCall
	// resent after a lost answer finds the call it created instead of
	// journaling a second one.
	if req.CallId == "" {
		req.CallId = newCallID()
	}
	return req, nil
}

// Begin begins a call and returns a handle whose Write always sends the
// kernel's key and capability. args is JSON text when it is a string, []byte or
// json.RawMessage (sent exactly as given), and is marshalled with encoding/json
// otherwise (a map or struct: it must encode to a JSON object). In a replay
// (WithMode(Replay(run))), the handle's Recorded is the recorded call matched.
func (c *KernelClient) Begin(ctx context.Context, toolID string, args any, opts ...BeginOption) (*CapabilityHandle, error) {
	text, err := argumentsJSON(args)
	if err != nil {
		return nil, err
	}
	res, err := c.BeginCall(ctx, toolID, text, opts...)
	if err != nil {
		return nil, err
	}
	return c.handleFor(res)
}

// Complete marks a call done in the kernel's journal. The same outcome again
// is a no-op; another outcome is refused with FAILED_PRECONDITION.
func (c *KernelClient) Complete(ctx context.Context, callID string, outcome Outcome, detail string) (*kernelv1.CompleteCallResponse, error) {
	req := &kernelv1.CompleteCallRequest{CallId: callID, Outcome: outcome.proto(), OutcomeDetail: detail}
	if c.completes == nil {
		return invoke(ctx, c.o.callTimeout, "", c.raw.CompleteCall, req)
	}
	if refusal := checkRequest(req); refusal != nil {
		return nil, refusal
	}
	return c.completes.submit(ctx, req)
}

// ListPending returns every call begun and not completed, oldest first (of one
// tool, or of all when toolID is empty): what a crash leaves behind.
func (c *KernelClient) ListPending(ctx context.Context, toolID string) ([]*kernelv1.Call, error) {
	var out []*kernelv1.Call
	token := ""
	for {
		res, err := invoke(ctx, c.o.callTimeout, "", c.raw.ListPendingCalls, &kernelv1.ListPendingCallsRequest{ToolId: toolID, PageSize: 1000, PageToken: token})
		if err != nil {
			return nil, err
		}
		out = append(out, res.GetCalls()...)
		if token = res.GetNextPageToken(); token == "" {
			return out, nil
		}
	}
}

// Resumption is the result of Resume.
type Resumption struct {
	// Call is the call after resumption.
	Call *kernelv1.Call
	// Action says what to do next.
	Action kernelv1.ResumeAction
	// Handle is set with RESUME_ACTION_RETRY: a handle for the next attempt,
	// with a fresh capability for the same key (or request id).
	Handle *CapabilityHandle
}

// Resume is the recovery path for one pending call. Idempotent: the kernel
// re-derives the key from the recorded arguments and returns a handle with a
// fresh capability (Action RETRY). Queryable: it asks the ledger, and reports
// DONE when the effect happened. Unsafe: refused with FAILED_PRECONDITION,
// reason UNSAFE_NOT_RESUMABLE.
func (c *KernelClient) Resume(ctx context.Context, callID string) (*Resumption, error) {
	res, err := invoke(ctx, c.o.callTimeout, "", c.raw.ResumeCall, &kernelv1.ResumeCallRequest{CallId: callID})
	if err != nil {
		return nil, err
	}
	out := &Resumption{Call: res.GetCall(), Action: res.GetAction()}
	if res.GetAction() == kernelv1.ResumeAction_RESUME_ACTION_RETRY {
		if out.Handle, err = c.handleFor(res); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// SigningKeys returns the kernel's public JWKS (JSON text) and current key id.
func (c *KernelClient) SigningKeys(ctx context.Context) (*kernelv1.GetSigningKeysResponse, error) {
	return invoke(ctx, c.o.callTimeout, "", c.raw.GetSigningKeys, &kernelv1.GetSigningKeysRequest{})
}

// begun is what a handle is made from: a BeginCall or a RETRY ResumeCall answer.
type begun interface {
	GetCall() *kernelv1.Call
	GetCapability() string
	GetCapabilityExpiresAt() *timestamppb.Timestamp
}

func (c *KernelClient) handleFor(res begun) (*CapabilityHandle, error) {
	if res.GetCall() == nil || res.GetCapability() == "" {
		return nil, errors.New("keycap: kernel answered without a call or capability")
	}
	var exp time.Time
	if expires := res.GetCapabilityExpiresAt(); expires != nil {
		exp = expires.AsTime()
	}
	h := &CapabilityHandle{call: res.GetCall(), capability: res.GetCapability(), expiresAt: exp, ledger: c.ledger, kernel: c}
	if r, ok := res.(interface{ GetRecordedCall() *kernelv1.Call }); ok {
		h.recorded = r.GetRecordedCall()
	}
	return h, nil
}

// newCallID is a random (version 4) UUID, the form the TypeScript client uses.
func newCallID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux (getrandom)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
