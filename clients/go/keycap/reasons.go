package keycap

import (
	"strings"

	rulesv1 "github.com/keycap/keycap/clients/go/gen/keycap/rules/v1"
)

// ReasonString is the ErrorInfo reason of a catalogue entry
// (proto/keycap/rules/v1/reasons.proto): rulesv1.Reason_REASON_KEY_MISSING gives
// "KEY_MISSING", the value Error.Reason carries. Every reason keycap answers with
// is in the catalogue, with its status code as the value's `code` option.
func ReasonString(r rulesv1.Reason) string {
	return strings.TrimPrefix(r.String(), "REASON_")
}
