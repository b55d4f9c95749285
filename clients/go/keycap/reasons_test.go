package keycap

import (
	"testing"

	rulesv1 "github.com/keycap/keycap/clients/go/gen/keycap/rules/v1"
	"github.com/keycap/keycap/clients/go/reasons"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Package reasons is generated from proto/keycap/rules/v1/reasons.proto: every value of
// the Reason enum, with the code its `code` option states, and nothing else.
func TestGeneratedCatalogueIsTheProtoCatalogue(t *testing.T) {
	all := reasons.All()
	if len(all) != len(rulesv1.Reason_value)-1 { // REASON_UNSPECIFIED is no reason
		t.Fatalf("package reasons has %d reasons, the proto %d: run make generate", len(all), len(rulesv1.Reason_value)-1)
	}
	values := rulesv1.Reason(0).Descriptor().Values()
	for _, r := range all {
		v := values.ByName(protoreflect.Name("REASON_" + r)) // the ErrorInfo reason is the name without REASON_
		if v == nil {
			t.Errorf("reason %q is not in proto/keycap/rules/v1/reasons.proto", r)
			continue
		}
		want := codes.Code(proto.GetExtension(v.Options(), rulesv1.E_Code).(rulesv1.Code))
		if got, ok := reasons.Code(r); !ok || got != want {
			t.Errorf("reasons.Code(%q) = %s, %t; the proto says %s", r, got, ok, want)
		}
	}
}

// The Reason constants this package exports for callers' switch statements are the
// catalogue's, with the codes the services answer them with.
func TestReasonConstantsAreTheCatalogues(t *testing.T) {
	for reason, code := range map[string]codes.Code{
		ReasonKeyMismatch:                codes.PermissionDenied,
		ReasonCapabilityReused:           codes.PermissionDenied,
		ReasonExpired:                    codes.Unauthenticated,
		ReasonPrincipalCredentialMissing: codes.Unauthenticated,
		ReasonUnsafeNotResumable:         codes.FailedPrecondition,
		ReasonRequestInvalid:             codes.InvalidArgument,
	} {
		if got, ok := reasons.Code(reason); !ok || got != code {
			t.Errorf("reasons.Code(%q) = %s, %t; want %s", reason, got, ok, code)
		}
	}
}

func TestReasonString(t *testing.T) {
	if got := ReasonString(rulesv1.Reason_REASON_KEY_MISSING); got != ReasonKeyMissing {
		t.Fatalf("ReasonString = %q, want %q", got, ReasonKeyMissing)
	}
}
