package keycap

import (
	"context"
	"encoding/json"

	kernelv1 "github.com/keycap/keycap/clients/go/gen/keycap/kernel/v1"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// RunMode is the mode a call is begun in (ADR 0028, docs/run-modes.md): Live
// (the default), Replay of a recorded run, or Shadow beside a live run. Give it
// to one call with WithMode, or to every call of a client with WithRunMode.
//
// A replay call is matched to the recorded run's call at the same position
// (tool and key) and gets a capability with which the ledger answers from the
// recorded effect and writes nothing; CapabilityHandle.Recorded is the recorded
// call. A call that does not match is refused REPLAY_DIVERGED (metadata
// position, expected_call_id, expected_tool_id). A shadow call's effect goes to
// the ledger's shadow store, never to its entries. An Unsafe call in either is
// refused SANDBOX_UNSAFE_DENIED.
type RunMode struct {
	mode kernelv1.RunMode
	of   string
}

// Live is a real run: real effects, one per key.
var Live = RunMode{mode: kernelv1.RunMode_RUN_MODE_LIVE}

// Replay is a replay of the recorded run recordedRunID. Each call needs a run
// id of its own (WithRunID: the replay run, where positions are counted); keys
// are derived in the recorded run's context, so they are the recorded keys.
func Replay(recordedRunID string) RunMode {
	return RunMode{mode: kernelv1.RunMode_RUN_MODE_REPLAY, of: recordedRunID}
}

// Shadow is a shadow run beside the live run liveRunID ("" names none; the name
// only serves to list the two side by side).
func Shadow(liveRunID string) RunMode {
	return RunMode{mode: kernelv1.RunMode_RUN_MODE_SHADOW, of: liveRunID}
}

// WithMode begins the call in run mode m, overriding the client's WithRunMode.
func WithMode(m RunMode) BeginOption {
	return func(r *kernelv1.BeginCallRequest) { m.apply(r) }
}

// WithRunMode makes a KernelClient begin every call in run mode m unless the
// call is given its own (WithMode). Other clients ignore it.
func WithRunMode(m RunMode) Option {
	return func(o *options) { o.runMode = m }
}

func (m RunMode) apply(r *kernelv1.BeginCallRequest) {
	r.Mode, r.ReplayOfRunId, r.ShadowsRunId = m.mode, "", ""
	switch m.mode {
	case kernelv1.RunMode_RUN_MODE_REPLAY:
		r.ReplayOfRunId = m.of
	case kernelv1.RunMode_RUN_MODE_SHADOW:
		r.ShadowsRunId = m.of
	}
}

// BeginItem is one call of a BeginMany batch: Begin's arguments.
type BeginItem struct {
	ToolID string
	// Args as Begin takes them: JSON text (string, []byte, json.RawMessage) or a
	// value encoding/json marshals to a JSON object.
	Args   any
	CallID string
	RunID  string
}

// BeginResult answers one item of BeginMany: a handle, or the error Begin
// would have returned for the item alone.
type BeginResult struct {
	Handle *CapabilityHandle
	Err    error
}

// BeginMany begins 1 to 256 calls in one BeginCalls round trip, every one with
// opts (WithMode, for instance; WithCallID and WithRunID are the items' own).
// Each item is answered on its own, in order. The returned error is the
// batch's (not sent, or the whole BeginCalls refused); an item's is in its
// BeginResult. The items are begun concurrently: in a replay, calls of one
// replay run take their positions in no set order, so begin those one after
// another.
func (c *KernelClient) BeginMany(ctx context.Context, items []BeginItem, opts ...BeginOption) ([]BeginResult, error) {
	reqs := make([]*kernelv1.BeginCallRequest, len(items))
	for i, it := range items {
		text, err := argumentsJSON(it.Args)
		if err != nil {
			return nil, err
		}
		item := append(append([]BeginOption{}, opts...), WithCallID(it.CallID), WithRunID(it.RunID))
		if reqs[i], err = c.beginRequest(it.ToolID, text, item); err != nil {
			return nil, err
		}
	}
	res, err := invoke(ctx, c.o.callTimeout, "", c.raw.BeginCalls, &kernelv1.BeginCallsRequest{Calls: reqs})
	if err != nil {
		return nil, err
	}
	out := make([]BeginResult, len(res.GetResults()))
	for i, r := range res.GetResults() {
		if b := r.GetBegun(); b != nil {
			out[i].Handle, out[i].Err = c.handleFor(b)
		} else {
			out[i].Err = statusError(r.GetErrorStatus())
		}
	}
	return out, nil
}

// statusError reads an encoded google.rpc.Status (a refused batch item) as the
// *Error the call alone would have returned.
func statusError(raw []byte) error {
	st := &spb.Status{}
	if err := proto.Unmarshal(raw, st); err != nil {
		return &Error{Code: codes.Unknown, Reason: "UNKNOWN", Metadata: map[string]string{}, Message: "the batch item's status could not be read: " + err.Error()}
	}
	return FromError(status.FromProto(st).Err())
}

// argumentsJSON is Begin's args as JSON text.
func argumentsJSON(args any) (string, error) {
	switch a := args.(type) {
	case string:
		return a, nil
	case []byte:
		return string(a), nil
	case json.RawMessage:
		return string(a), nil
	default:
		b, err := json.Marshal(args)
		return string(b), err
	}
}
