package keycap_test

import (
	"testing"

	"github.com/keycap/keycap/clients/go/keycap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// An INVALID_ARGUMENT refusal names its bad fields in a google.rpc.BadRequest
// beside the ErrorInfo (what the kernel sends for a request rule that fails).
func TestFromErrorReadsTheBadRequestFieldViolations(t *testing.T) {
	st, err := status.New(codes.InvalidArgument, "tool.tool_id: does not match").WithDetails(
		&errdetails.ErrorInfo{Reason: "INVALID_TOOL_ID", Domain: keycap.Domain, Metadata: map[string]string{"field": "tool.tool_id"}},
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: "tool.tool_id", Description: "does not match", Reason: "INVALID_TOOL_ID"},
			{Field: "tool.effect_class.idempotent.key.fields[1]", Description: "not a pointer", Reason: "INVALID_JSON_POINTER"},
		}},
	)
	if err != nil {
		t.Fatal(err)
	}
	kerr := keycap.FromError(st.Err())
	if kerr.Reason != "INVALID_TOOL_ID" || kerr.Metadata["field"] != "tool.tool_id" {
		t.Fatalf("reason %q metadata %v", kerr.Reason, kerr.Metadata)
	}
	want := []keycap.FieldViolation{
		{Field: "tool.tool_id", Description: "does not match", Reason: "INVALID_TOOL_ID"},
		{Field: "tool.effect_class.idempotent.key.fields[1]", Description: "not a pointer", Reason: "INVALID_JSON_POINTER"},
	}
	if len(kerr.FieldViolations) != len(want) || kerr.FieldViolations[0] != want[0] || kerr.FieldViolations[1] != want[1] {
		t.Fatalf("field violations %+v, want %+v", kerr.FieldViolations, want)
	}
	if none := keycap.FromError(status.Error(codes.NotFound, "no such tool")); none.FieldViolations != nil {
		t.Fatalf("field violations %+v from a status without a BadRequest", none.FieldViolations)
	}
}
