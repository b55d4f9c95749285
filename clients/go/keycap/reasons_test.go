package keycap

import (
	"os"
	"regexp"
	"testing"

	rulesv1 "github.com/keycap/keycap/clients/go/gen/keycap/rules/v1"
)

// The Reason constants of this package are written out for callers' switch
// statements; each must be a reason of the proto catalogue, so none can drift.
func TestReasonConstantsAreInTheCatalogue(t *testing.T) {
	src, err := os.ReadFile("errors.go")
	if err != nil {
		t.Fatal(err)
	}
	consts := regexp.MustCompile(`(?m)^\s+Reason\w+\s*=\s*"([A-Z0-9_]+)"`).FindAllStringSubmatch(string(src), -1)
	if len(consts) < 10 {
		t.Fatalf("found %d Reason constants in errors.go; the pattern no longer matches", len(consts))
	}
	for _, c := range consts {
		if _, ok := rulesv1.Reason_value["REASON_"+c[1]]; !ok {
			t.Errorf("reason %q is not in proto/keycap/rules/v1/reasons.proto", c[1])
		}
	}
}

func TestReasonString(t *testing.T) {
	if got := ReasonString(rulesv1.Reason_REASON_KEY_MISSING); got != ReasonKeyMissing {
		t.Fatalf("ReasonString = %q, want %q", got, ReasonKeyMissing)
	}
}
