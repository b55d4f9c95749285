package sink

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
)

// Options configures New.
type Options struct {
	// Name is the sink's name in refusal records ("sink:<name>"): 1-63 of
	// [a-z0-9._-], starting with a letter or digit. Required.
	Name string
	// Tools are the tool ids this sink serves; a genuine capability for any
	// other is refused TOOL_NOT_ACCEPTED. Required, non-empty.
	Tools []string
	// Keys are the kernel's public keys (NewKernelKeys, NewStaticKeys). Required.
	Keys KeySource
	// Verifier holds the ledger's verification options; zero values are the
	// ledger's defaults. Its Now is the sink's clock.
	Verifier VerifierOptions
	// SpentStore spends unsafe and queryable capabilities once. Without it the
	// sink admits idempotent capabilities only (EFFECT_CLASS_MISMATCH otherwise).
	SpentStore SpentStore
	// Recorder is keycap's refusal store (OpenMongoRecorder); without it
	// refusals reach only OnRefusal.
	Recorder Recorder
	// OnRefusal is called for every refusal, after it is recorded.
	OnRefusal func(RefusalEvent)
	// CapabilityHeader is the HTTP header carrying the capability. Default
	// "Authorization" (value "Bearer <capability>"); another name (e.g.
	// "Keycap-Capability") takes the bare token or "Bearer <token>".
	CapabilityHeader string
}

// Request is what the transport knows about the request being admitted.
type Request struct {
	// Method is the gRPC full method ("/pkg.Service/Method") or "HTTP <METHOD> <path>".
	Method string
	// Peer is the caller's "ip:port".
	Peer string
	// Authorization is the `authorization` value(s) carried; none: no capability.
	Authorization []string
	// IdempotencyKey is the request's own key (metadata `idempotency-key`,
	// header `Idempotency-Key`); HasIdempotencyKey says whether it sent one.
	IdempotencyKey    string
	HasIdempotencyKey bool
}

// RefusalEvent is a refusal as the OnRefusal hook sees it.
type RefusalEvent struct {
	Sink    string
	Refusal *Refusal
	Request Request
	// ToolID is the tool the capability names, verified or not (ToolIDVerified);
	// "" when unreadable.
	ToolID         string
	ToolIDVerified bool
}

// Sink admits requests under capabilities (ADR 0013).
type Sink struct {
	name     string
	service  string
	tools    map[string]bool
	verifier *Verifier
	opts     Options
	now      func() time.Time
}

// New checks the options and builds the sink.
func New(opts Options) (*Sink, error) {
	service, err := SinkService(opts.Name)
	if err != nil {
		return nil, fmt.Errorf("sink: %w", err)
	}
	if len(opts.Tools) == 0 {
		return nil, errors.New("sink: a sink must name the tools it serves (Tools)")
	}
	tools := make(map[string]bool, len(opts.Tools))
	for _, t := range opts.Tools {
		tools[t] = true
	}
	// Sandbox capabilities are verified, so that their refusal names the verified
	// tool and says why (not live), rather than an unverified WRONG_TOKEN_TYPE.
	vopts := opts.Verifier
	vopts.VerifySandbox = true
	v, err := NewVerifier(opts.Keys, vopts)
	if err != nil {
		return nil, err
	}
	if opts.CapabilityHeader == "" {
		opts.CapabilityHeader = "Authorization"
	}
	return &Sink{name: opts.Name, service: service, tools: tools, verifier: v, opts: opts, now: v.opts.Now}, nil
}

// Name is the sink's name; Service is its records' service, "sink:<name>".
func (s *Sink) Name() string    { return s.name }
func (s *Sink) Service() string { return s.service }

// Admit runs the admission for one request: the verified capability, or a
// *Refusal after it was recorded. The order is fixed, so a request breaking
// several rules gets the same reason every time: verification, the run mode
// (live only: a shadow or replay capability is refused
// SANDBOX_CAPABILITY_NOT_LIVE, ADR 0028), the tool allow-list, the idempotency
// key, then single use.
func (s *Sink) Admit(ctx context.Context, req Request) (*Capability, error) {
	return s.admit(ctx, req, nil)
}

// admit is Admit, and with a call (AdmitCall) the call's own checks too.
func (s *Sink) admit(ctx context.Context, req Request, call *Call) (*Capability, error) {
	var c *Capability
	var r *Refusal
	switch len(req.Authorization) {
	case 0:
		c, r = s.verifier.verify(ctx, "", false)
	case 1:
		c, r = s.verifier.verify(ctx, req.Authorization[0], true)
	default:
		r = refuse(ReasonCapabilityMalformed, "more than one authorization value", unverifiedInfo{})
	}
	if r != nil {
		u := r.unverified
		rec := RefusalRecord{
			ToolID: u.toolID, ToolIDVerified: r.SignatureVerified, CapabilityKey: u.key,
			CapabilityRequestID: u.requestID, CallID: u.callID, CapabilityID: u.jti, KeyID: u.kid, Effect: u.effect,
		}
		s.report(ctx, r, req, call.recordAgainst(rec))
		return nil, r
	}
	if r := s.checkVerified(ctx, c, req, call); r != nil {
		rec := RefusalRecord{
			ToolID: c.ToolID, ToolIDVerified: true, Principal: c.Subject, CapabilityKey: c.Key,
			CapabilityRequestID: c.RequestID, CallID: c.CallID, CapabilityID: c.JTI, KeyID: c.KeyID, Effect: c.Effect,
		}
		s.report(ctx, r, req, call.recordAgainst(rec))
		return nil, r
	}
	return c, nil
}

func (s *Sink) checkVerified(ctx context.Context, c *Capability, req Request, call *Call) *Refusal {
	if c.Mode != "" {
		// A sink performs live effects: a shadow or replay capability grants none here.
		r := permissionDenied(ReasonSandboxCapabilityNotLive, fmt.Sprintf("sink %s performs live effects only; this capability is of a %s run", s.name, c.Mode))
		r.Metadata, r.SignatureVerified = map[string]string{"mode": c.Mode}, true
		return r
	}
	if !s.tools[c.ToolID] {
		return permissionDenied(ReasonToolNotAccepted, fmt.Sprintf("sink %s does not serve tool %s", s.name, strconv.Quote(clip(c.ToolID, 128))))
	}
	if call != nil && c.ToolID != call.ToolID {
		// A genuine capability for a sibling tool is still another tool's.
		return permissionDenied(ReasonToolNotAccepted, fmt.Sprintf("the capability is for tool %s, not %s", strconv.Quote(clip(c.ToolID, 128)), strconv.Quote(clip(call.ToolID, 128))))
	}
	if req.HasIdempotencyKey && req.IdempotencyKey != c.Key {
		return permissionDenied(ReasonKeyMismatch, "the request's idempotency key is not the capability's key")
	}
	if c.Effect == EffectIdempotent {
		if call != nil {
			return bindArguments(c, call.Arguments)
		}
		return nil
	}
	if s.opts.SpentStore == nil {
		// Running an unsafe effect without single use would be the double charge
		// keycap exists to stop.
		return permissionDenied(ReasonEffectClassMismatch, fmt.Sprintf("sink %s has no spent store, so it accepts idempotent capabilities only", s.name))
	}
	tol := time.Duration(s.verifier.opts.ClockToleranceSeconds) * time.Second
	first, err := s.opts.SpentStore.Spend(ctx, SpentCapability{
		Sink: s.name, JTI: c.JTI, ToolID: c.ToolID, CallID: c.CallID, Effect: c.Effect,
		ExpiresAt: time.Unix(c.ExpiresAt, 0).Add(tol),
	})
	if err != nil {
		var r *Refusal
		if errors.As(err, &r) {
			return r
		}
		return unavailable(ReasonDatabaseUnavailable, "the spent-capability store failed; retry", err)
	}
	if !first {
		return permissionDenied(ReasonCapabilityReused, fmt.Sprintf("this %s capability was already used at sink %s", c.Effect, s.name))
	}
	return nil
}

func (s *Sink) report(ctx context.Context, r *Refusal, req Request, rec RefusalRecord) {
	rec.Method, rec.Reason, rec.Code, rec.Peer, rec.Message = req.Method, r.Reason, codeName(r.Code), req.Peer, r.Message
	if req.HasIdempotencyKey {
		rec.AttemptedKey = req.IdempotencyKey
	}
	if s.opts.Recorder != nil {
		func() {
			// A recorder that panics must not turn a refusal into a crash.
			defer func() { _ = recover() }()
			s.opts.Recorder.Record(ctx, rec)
		}()
	}
	if s.opts.OnRefusal != nil {
		func() {
			defer func() { _ = recover() }()
			s.opts.OnRefusal(RefusalEvent{Sink: s.name, Refusal: r, Request: req, ToolID: rec.ToolID, ToolIDVerified: rec.ToolIDVerified})
		}()
	}
}

// codeName is the gRPC code's name as keycap records it (PERMISSION_DENIED).
func codeName(c codes.Code) string {
	switch c {
	case codes.Unauthenticated:
		return "UNAUTHENTICATED"
	case codes.PermissionDenied:
		return "PERMISSION_DENIED"
	case codes.Unavailable:
		return "UNAVAILABLE"
	case codes.InvalidArgument:
		return "INVALID_ARGUMENT"
	}
	return "UNKNOWN"
}

type capabilityKey struct{}

// CapabilityFromContext is the verified capability the middleware admitted the
// request under; ok is false outside a protected handler.
func CapabilityFromContext(ctx context.Context) (*Capability, bool) {
	c, ok := ctx.Value(capabilityKey{}).(*Capability)
	return c, ok && c != nil
}

func withCapability(ctx context.Context, c *Capability) context.Context {
	return context.WithValue(ctx, capabilityKey{}, c)
}
