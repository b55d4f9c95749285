package keycap

import (
	"testing"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	kernelv1 "github.com/keycap/keycap/clients/go/gen/keycap/kernel/v1"
	ledgerv1 "github.com/keycap/keycap/clients/go/gen/keycap/ledger/v1"
	rulesv1 "github.com/keycap/keycap/clients/go/gen/keycap/rules/v1"
)

// ruledMessage builds, at run time, a message keycap's protos do not have:
//
//	message Probe {
//	  string named = 1 [(buf.validate.field).string.min_len = 1,
//	                    (keycap.rules.v1.field) = {rule: "string.min_len", reason: "PROBE_NAMED_EMPTY"}];
//	  string unnamed = 2 [(buf.validate.field).string.min_len = 1];
//	}
//
// so the mapping is seen working from the descriptor alone, with no table.
func ruledMessage(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	minLen := func() *descriptorpb.FieldOptions {
		o := &descriptorpb.FieldOptions{}
		proto.SetExtension(o, validate.E_Field, validate.FieldRules_builder{
			String: validate.StringRules_builder{MinLen: proto.Uint64(1)}.Build(),
		}.Build())
		return o
	}
	named := minLen()
	proto.SetExtension(named, rulesv1.E_Field, []*rulesv1.Refusal{{Rule: "string.min_len", Reason: "PROBE_NAMED_EMPTY"}})
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	file := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("keycap/test/probe.proto"),
		Package:    proto.String("keycap.test"),
		Syntax:     proto.String("proto3"),
		Dependency: []string{"buf/validate/validate.proto", "keycap/rules/v1/refusal.proto"},
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Probe"),
			Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("named"), JsonName: proto.String("named"), Number: proto.Int32(1), Type: str, Label: opt, Options: named},
				{Name: proto.String("unnamed"), JsonName: proto.String("unnamed"), Number: proto.Int32(2), Type: str, Label: opt, Options: minLen()},
			},
		}},
	}
	fd, err := protodesc.NewFile(file, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().Get(0)
}

func TestARuleWithoutAStatedReasonIsRequestInvalid(t *testing.T) {
	md := ruledMessage(t)
	msg := dynamicpb.NewMessage(md)
	refusal := checkRequest(msg)
	if refusal == nil {
		t.Fatal("an empty Probe passed its rules")
	}
	if refusal.Code != codes.InvalidArgument || refusal.Reason != "PROBE_NAMED_EMPTY" {
		t.Fatalf("%s %s, want INVALID_ARGUMENT PROBE_NAMED_EMPTY (the first violation's stated reason)", refusal.Code, refusal.Reason)
	}
	want := []FieldViolation{
		{Field: "named", Reason: "PROBE_NAMED_EMPTY"},
		{Field: "unnamed", Reason: ReasonRequestInvalid},
	}
	if len(refusal.FieldViolations) != len(want) {
		t.Fatalf("violations %+v, want %+v", refusal.FieldViolations, want)
	}
	for i, w := range want {
		if got := refusal.FieldViolations[i]; got.Field != w.Field || got.Reason != w.Reason {
			t.Fatalf("violation %d is %+v, want %s %s", i, got, w.Field, w.Reason)
		}
	}
	msg.Set(md.Fields().ByName("named"), protoreflect.ValueOfString("x"))
	msg.Set(md.Fields().ByName("unnamed"), protoreflect.ValueOfString("y"))
	if refusal := checkRequest(msg); refusal != nil {
		t.Fatalf("a valid Probe refused: %v", refusal)
	}
}

// Requests without rules (Write, the ledger's hot path) do not go through the validator.
func TestOnlyRequestsWithRulesAreChecked(t *testing.T) {
	for _, tc := range []struct {
		msg  proto.Message
		want bool
	}{
		{&kernelv1.RegisterToolRequest{}, true},
		{&kernelv1.Tool{}, true},
		{&kernelv1.BeginCallRequest{}, true},
		{&kernelv1.ResumeCallRequest{}, true},
		{&kernelv1.GetToolRequest{}, false},
		{&ledgerv1.WriteRequest{}, false},
	} {
		if got := requestHasRules(tc.msg.ProtoReflect().Descriptor()); got != tc.want {
			t.Errorf("requestHasRules(%s) = %v, want %v", tc.msg.ProtoReflect().Descriptor().FullName(), got, tc.want)
		}
	}
}
