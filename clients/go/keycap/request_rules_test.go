package keycap_test

// Issue 14: the Go client checks the request rules written in proto/
// (protovalidate) before sending, and refuses a request that breaks one with
// the reason the proto states beside the rule, which is the kernel's. A real
// in-process gRPC server stands in for the kernel and counts what reaches it,
// so "not sent" is observed, not assumed. Parity with the real kernel's answer
// is in request_rules_e2e_test.go.

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	effectv1 "github.com/keycap/keycap/clients/go/gen/keycap/effect/v1"
	kernelv1 "github.com/keycap/keycap/clients/go/gen/keycap/kernel/v1"
	"github.com/keycap/keycap/clients/go/keycap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// countingKernel is a KernelService that registers whatever it is sent and
// counts the RegisterTool calls it saw.
type countingKernel struct {
	kernelv1.UnimplementedKernelServiceServer
	registers atomic.Int32
}

func (k *countingKernel) RegisterTool(_ context.Context, req *kernelv1.RegisterToolRequest) (*kernelv1.RegisterToolResponse, error) {
	k.registers.Add(1)
	return &kernelv1.RegisterToolResponse{Tool: req.GetTool()}, nil
}

func startCountingKernel(t *testing.T) (*countingKernel, *keycap.KernelClient) {
	t.Helper()
	fake := &countingKernel{}
	lis := listen(t)
	srv := grpc.NewServer()
	kernelv1.RegisterKernelServiceServer(srv, fake)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	k, err := keycap.NewKernelClient(lis.Addr().String(), keycap.WithToken(fakeRuntimeToken))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	return fake, k
}

// ruleCase is a tool that breaks one rule class, the reason the kernel gives
// for it, and the proto path of the violation that carries that reason.
type ruleCase struct {
	name   string
	tool   *kernelv1.Tool // sent with RegisterToolProto; nil sends no tool
	reason string
	field  string
}

func wireTool(id string, effect *effectv1.EffectClass) *kernelv1.Tool {
	return &kernelv1.Tool{ToolId: id, EffectClass: effect}
}

func idempotentClass(kd *effectv1.KeyDerivation) *effectv1.EffectClass {
	return &effectv1.EffectClass{Kind: &effectv1.EffectClass_Idempotent{Idempotent: &effectv1.Idempotent{Key: kd}}}
}

func queryableClass(lookup *effectv1.RequestIdLookup) *effectv1.EffectClass {
	return &effectv1.EffectClass{Kind: &effectv1.EffectClass_Queryable{Queryable: &effectv1.Queryable{Lookup: lookup}}}
}

// helperTool is the wire form the registration helpers produce.
func helperTool(id string, effect keycap.Effect) *kernelv1.Tool {
	return keycap.Tool{ID: id, Effect: effect}.Proto()
}

// ruleCases covers every rule in proto/ that a RegisterTool request can break
// (each rule id of each annotated field and oneof), the wire form and, where
// one can build it, the registration helpers' output.
func ruleCases(prefix string) []ruleCase {
	runID := effectv1.ContextField_CONTEXT_FIELD_RUN_ID
	return []ruleCase{
		{"no tool", nil, "TOOL_REQUIRED", "tool"},
		{"an Idempotent without a key", wireTool(prefix+".nokey", idempotentClass(nil)), "KEY_DERIVATION_REQUIRED", "tool.effect_class.idempotent.key"},
		{"Idempotent with no fields (helper)", helperTool(prefix+".nofields", keycap.Idempotent(keycap.KeyDerivation{})), "KEY_DERIVATION_NO_FIELDS", "tool.effect_class.idempotent.key.fields"},
		{"a field named twice (helper)", helperTool(prefix+".twice", keycap.Idempotent(keycap.KeyDerivation{Fields: []string{"/a", "/a"}})), "KEY_DERIVATION_DUPLICATE_FIELD", "tool.effect_class.idempotent.key.fields"},
		{"a field that is not a JSON Pointer (helper)", helperTool(prefix+".pointer", keycap.Idempotent(keycap.KeyDerivation{Fields: []string{"/a", "b"}})), "INVALID_JSON_POINTER", "tool.effect_class.idempotent.key.fields[1]"},
		{"a pointer with a bad escape", wireTool(prefix+".escape", idempotentClass(&effectv1.KeyDerivation{Fields: []string{"/a~2"}})), "INVALID_JSON_POINTER", "tool.effect_class.idempotent.key.fields[0]"},
		{"an unspecified context field", wireTool(prefix+".ctx0", idempotentClass(&effectv1.KeyDerivation{Fields: []string{"/a"}, ContextFields: []effectv1.ContextField{effectv1.ContextField_CONTEXT_FIELD_UNSPECIFIED}})), "KEY_DERIVATION_BAD_CONTEXT_FIELD", "tool.effect_class.idempotent.key.context_fields[0]"},
		{"an undefined context field", wireTool(prefix+".ctx7", idempotentClass(&effectv1.KeyDerivation{Fields: []string{"/a"}, ContextFields: []effectv1.ContextField{runID, 7}})), "KEY_DERIVATION_BAD_CONTEXT_FIELD", "tool.effect_class.idempotent.key.context_fields[1]"},
		{"a context field named twice", wireTool(prefix+".ctx2", idempotentClass(&effectv1.KeyDerivation{Fields: []string{"/a"}, ContextFields: []effectv1.ContextField{runID, runID}})), "KEY_DERIVATION_BAD_CONTEXT_FIELD", "tool.effect_class.idempotent.key.context_fields"},
		{"no effect class (helper: zero Effect)", helperTool(prefix+".noeffect", keycap.Effect{}), "EFFECT_CLASS_REQUIRED", "tool.effect_class"},
		{"an empty effect class", wireTool(prefix+".emptyeffect", &effectv1.EffectClass{}), "EFFECT_CLASS_REQUIRED", "tool.effect_class.kind"},
		{"a Queryable without a lookup", wireTool(prefix+".nolookup", queryableClass(nil)), "REQUEST_ID_FIELD_REQUIRED", "tool.effect_class.queryable.lookup"},
		{"an empty request id field (helper)", helperTool(prefix+".emptylookup", keycap.Queryable("")), "REQUEST_ID_FIELD_REQUIRED", "tool.effect_class.queryable.lookup.request_id_field"},
		{"a request id field that is not a JSON Pointer (helper)", helperTool(prefix+".badlookup", keycap.Queryable("request_id")), "INVALID_JSON_POINTER", "tool.effect_class.queryable.lookup.request_id_field"},
		{"a tool id with a space", helperTool("go rules bad", keycap.Unsafe()), "INVALID_TOOL_ID", "tool.tool_id"},
		{"an empty tool id", helperTool("", keycap.Unsafe()), "INVALID_TOOL_ID", "tool.tool_id"},
		{"a tool id of 129 characters", helperTool(strings.Repeat("x", 129), keycap.Unsafe()), "INVALID_TOOL_ID", "tool.tool_id"},
	}
}

// requireRuleRefusal checks err is the client's refusal of a broken rule:
// INVALID_ARGUMENT with the kernel's reason, made by this client, naming the
// field, and a field violation of that path with that reason.
func requireRuleRefusal(t *testing.T, err error, reason, field string) *keycap.Error {
	t.Helper()
	kerr := requireCode(t, err, codes.InvalidArgument)
	if kerr.Reason != reason {
		t.Fatalf("reason %q, want %q (%s)", kerr.Reason, reason, kerr.Message)
	}
	if kerr.Domain != keycap.ClientDomain {
		t.Fatalf("domain %q, want %q: the refusal must come from the client", kerr.Domain, keycap.ClientDomain)
	}
	found := false
	for _, v := range kerr.FieldViolations {
		if v.Reason == "" || v.Description == "" || v.Field == "" {
			t.Fatalf("incomplete field violation %+v", v)
		}
		if v.Field == field && v.Reason == reason {
			found = true
		}
	}
	if !found {
		t.Fatalf("no field violation %s %s in %+v", field, reason, kerr.FieldViolations)
	}
	return kerr
}

func TestRequestRulesRefuseEachBrokenRuleBeforeSending(t *testing.T) {
	fake, k := startCountingKernel(t)
	for _, tc := range ruleCases("go.rules") {
		t.Run(tc.name, func(t *testing.T) {
			before := fake.registers.Load()
			_, err := k.RegisterToolProto(context.Background(), tc.tool)
			kerr := requireRuleRefusal(t, err, tc.reason, tc.field)
			if kerr.FieldViolations[0].Reason != kerr.Reason || kerr.Metadata["field"] != kerr.FieldViolations[0].Field {
				t.Fatalf("the error's reason and field %q %v are not its first violation's %+v", kerr.Reason, kerr.Metadata, kerr.FieldViolations[0])
			}
			if n := fake.registers.Load() - before; n != 0 {
				t.Fatalf("the kernel saw %d RegisterTool calls: the refused request was sent", n)
			}
		})
	}
}

func TestRequestRulesNameEveryBrokenRuleOfARequest(t *testing.T) {
	fake, k := startCountingKernel(t)
	_, err := k.RegisterTool(context.Background(), keycap.Tool{ID: "bad id", Effect: keycap.Idempotent(keycap.KeyDerivation{Fields: []string{"x", "x"}})})
	kerr := requireRuleRefusal(t, err, "INVALID_TOOL_ID", "tool.tool_id")
	got := map[string]string{}
	for _, v := range kerr.FieldViolations {
		got[v.Field+" "+v.Reason] = v.Description
	}
	for _, want := range []string{
		"tool.tool_id INVALID_TOOL_ID",
		"tool.effect_class.idempotent.key.fields KEY_DERIVATION_DUPLICATE_FIELD",
		"tool.effect_class.idempotent.key.fields[0] INVALID_JSON_POINTER",
		"tool.effect_class.idempotent.key.fields[1] INVALID_JSON_POINTER",
	} {
		if _, ok := got[want]; !ok {
			t.Fatalf("no violation %q in %+v", want, kerr.FieldViolations)
		}
	}
	if len(kerr.FieldViolations) != 4 {
		t.Fatalf("%d violations, want 4: %+v", len(kerr.FieldViolations), kerr.FieldViolations)
	}
	if n := fake.registers.Load(); n != 0 {
		t.Fatalf("the kernel saw %d RegisterTool calls", n)
	}
}

func TestToolValidateReportsTheRefusalRegisterToolWouldGive(t *testing.T) {
	fake, k := startCountingKernel(t)
	bad := keycap.Tool{ID: "go.rules.validate", Effect: keycap.Idempotent(keycap.KeyDerivation{Fields: []string{"order_id"}})}
	verr := bad.Validate()
	requireRuleRefusal(t, verr, "INVALID_JSON_POINTER", "tool.effect_class.idempotent.key.fields[0]")
	_, rerr := k.RegisterTool(context.Background(), bad)
	requireRuleRefusal(t, rerr, "INVALID_JSON_POINTER", "tool.effect_class.idempotent.key.fields[0]")
	if verr.Error() != rerr.Error() {
		t.Fatalf("Validate %q and RegisterTool %q differ", verr, rerr)
	}
	if n := fake.registers.Load(); n != 0 {
		t.Fatalf("the kernel saw %d RegisterTool calls", n)
	}
	for _, good := range validTools("go.rules.validate") {
		if err := good.Validate(); err != nil {
			t.Fatalf("Validate(%s) = %v, want nil", good.ID, err)
		}
	}
}

// validTools is one tool of each effect class in the helpers' shapes,
// including a derivation with every option.
func validTools(prefix string) []keycap.Tool {
	return []keycap.Tool{
		{ID: prefix + ".idem", Effect: keycap.Idempotent(keycap.KeyDerivation{Fields: []string{"/a", "/b~1c", "/d~0e/0", "/"}, Version: 3, RunID: true})},
		{ID: prefix + ".query", Effect: keycap.Queryable("/request_id")},
		{ID: prefix + ".unsafe", Effect: keycap.Unsafe(), ArgumentsSchema: []byte(`{"type":"object"}`)},
	}
}

func TestRequestRulesSendAValidTool(t *testing.T) {
	fake, k := startCountingKernel(t)
	tools := validTools("go.rules.ok")
	for _, tool := range tools {
		res, err := k.RegisterTool(context.Background(), tool)
		if err != nil {
			t.Fatalf("RegisterTool(%s): %v", tool.ID, err)
		}
		if res.GetTool().GetToolId() != tool.ID {
			t.Fatalf("RegisterTool(%s) answered %v", tool.ID, res.GetTool())
		}
	}
	if n := fake.registers.Load(); int(n) != len(tools) {
		t.Fatalf("the kernel saw %d RegisterTool calls, want %d", n, len(tools))
	}
}
