package keyderive

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// Scheme is the domain tag hashed in front of every key's canonical document.
const Scheme = "keycap/idempotency-key/v1"

// The kernel's default limits on the arguments text (ADR 0002).
const (
	DefaultMaxBytes = 64 * 1024
	DefaultMaxDepth = 32
)

// Refusal reasons, as the kernel gives them (ADR 0002's table).
const (
	ReasonInvalidUTF8              = "INVALID_UTF8"
	ReasonArgumentsTooLarge        = "ARGUMENTS_TOO_LARGE"
	ReasonArgumentsNotJSON         = "ARGUMENTS_NOT_JSON"
	ReasonArgumentsDuplicateMember = "ARGUMENTS_DUPLICATE_MEMBER"
	ReasonArgumentsTooDeep         = "ARGUMENTS_TOO_DEEP"
	ReasonArgumentsNonFiniteNumber = "ARGUMENTS_NON_FINITE_NUMBER"
	ReasonArgumentsInvalidUnicode  = "ARGUMENTS_INVALID_UNICODE"
	ReasonArgumentsNotObject       = "ARGUMENTS_NOT_OBJECT"
	ReasonToolIDRequired           = "TOOL_ID_REQUIRED"
	ReasonNoFields                 = "KEY_DERIVATION_NO_FIELDS"
	ReasonInvalidJSONPointer       = "INVALID_JSON_POINTER"
	ReasonDuplicateField           = "KEY_DERIVATION_DUPLICATE_FIELD"
	ReasonBadVersion               = "KEY_DERIVATION_BAD_VERSION"
	ReasonBadContextField          = "KEY_DERIVATION_BAD_CONTEXT_FIELD"
	ReasonKeyFieldMissing          = "KEY_FIELD_MISSING"
	ReasonKeyFieldNull             = "KEY_FIELD_NULL"
	ReasonKeyFieldUnsafeInteger    = "KEY_FIELD_UNSAFE_INTEGER"
	ReasonRunIDRequired            = "RUN_ID_REQUIRED"
)

// ContextRunID is the one call-context field a derivation may name.
const ContextRunID = "run_id"

// Error is a refusal to derive: the kernel's reason for the same input.
type Error struct {
	Reason   string
	Message  string
	Metadata map[string]string
}

func (e *Error) Error() string { return e.Reason + ": " + e.Message }

func newError(reason, message string, metadata map[string]string) *Error {
	return &Error{Reason: reason, Message: message, Metadata: metadata}
}

// Derivation is how an Idempotent tool's key is derived (the kernel's
// KeyDerivation).
type Derivation struct {
	// Fields are RFC 6901 pointers into the arguments, exactly as registered.
	Fields []string
	// Version is hashed into the key; 0 (protobuf's "not set") is 1.
	Version int64
	// ContextFields may name "run_id": then the run id enters the key.
	ContextFields []string
}

// Context is what was recorded about the call besides its arguments.
type Context struct {
	RunID string
}

// Limits bound the arguments text; zero values are the kernel's defaults.
type Limits struct {
	MaxBytes int
	MaxDepth int
}

// Key derives the idempotency key of a call to toolID with the raw JSON
// arguments: the same key the kernel derives, or the kernel's refusal as *Error.
func Key(toolID string, d Derivation, arguments []byte, ctx Context) (string, error) {
	return KeyWithLimits(toolID, d, arguments, ctx, Limits{})
}

// KeyWithLimits is Key with other limits on the arguments.
func KeyWithLimits(toolID string, d Derivation, arguments []byte, ctx Context, lim Limits) (string, error) {
	doc, err := canonical(toolID, d, arguments, ctx, lim)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(Scheme))
	h.Write([]byte{0})
	h.Write(doc)
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)), nil
}

// CanonicalDocument is the RFC 8785 document Key hashes, with the same
// refusals: for comparing bytes with another implementation, not just digests.
func CanonicalDocument(toolID string, d Derivation, arguments []byte, ctx Context) ([]byte, error) {
	doc, err := canonical(toolID, d, arguments, ctx, Limits{})
	if err != nil {
		return nil, err
	}
	return doc, nil
}

// canonical runs the checks in ADR 0002's order; the first failing one answers.
func canonical(toolID string, d Derivation, arguments []byte, ctx Context, lim Limits) ([]byte, *Error) {
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = DefaultMaxBytes
	}
	if lim.MaxDepth <= 0 {
		lim.MaxDepth = DefaultMaxDepth
	}
	// (1) Never replaced by U+FFFD: that would give different texts one key.
	if !utf8.Valid(arguments) || !utf8.ValidString(ctx.RunID) || !utf8.ValidString(toolID) {
		return nil, newError(ReasonInvalidUTF8, "the call is not well-formed UTF-8", nil)
	}
	if len(arguments) > lim.MaxBytes {
		return nil, newError(ReasonArgumentsTooLarge, "arguments are larger than "+strconv.Itoa(lim.MaxBytes)+" bytes", nil)
	}
	root, err := parseStrict(arguments, lim.MaxDepth)
	if err != nil {
		return nil, err
	}
	if root.kind != kindObject {
		return nil, newError(ReasonArgumentsNotObject, "arguments must be a JSON object", nil)
	}
	tokens, err := checkDerivation(d)
	if err != nil {
		return nil, err
	}
	if toolID == "" {
		return nil, newError(ReasonToolIDRequired, "tool_id must be a non-empty string to derive a key", map[string]string{"field": "tool_id"})
	}
	fields := make([]byte, 0, 256)
	fields = append(fields, '{')
	for i, pointer := range d.Fields {
		v, err := fieldValue(root, pointer, tokens[i])
		if err != nil {
			return nil, err
		}
		if i > 0 {
			fields = append(fields, ',')
		}
		fields = append(fields, quote(pointer)...)
		fields = append(fields, ':')
		fields = append(fields, arguments[v.start:v.end]...)
	}
	fields = append(fields, '}')
	context := []byte("{}")
	if namesRunID(d) {
		if ctx.RunID == "" {
			return nil, newError(ReasonRunIDRequired, "run_id is required: this tool's key derivation names the run id", map[string]string{"field": "run_id"})
		}
		context = append([]byte(`{"run_id":`), append(quote(ctx.RunID), '}')...)
	}
	version := d.Version
	if version == 0 {
		version = 1
	}
	doc := []byte(`{"tool_id":` + string(quote(toolID)) + `,"derivation_version":` + strconv.FormatInt(version, 10) +
		`,"fields":` + string(fields) + `,"context":` + string(context) + `}`)
	// JCS sorts members by UTF-16 code units, writes numbers in ECMAScript's
	// shortest form (1.0 → 1, -0 → 0) and strings minimally escaped.
	out, jerr := jcs.Transform(doc)
	if jerr != nil {
		// Unreachable for text the strict parser accepted; fail closed if not.
		return nil, newError(ReasonArgumentsNotJSON, "arguments could not be canonicalised: "+jerr.Error(), nil)
	}
	return out, nil
}

// fieldValue is one named field: missing, then null, then unsafe integer.
func fieldValue(root *node, pointer string, tokens []string) (*node, *Error) {
	v := resolve(root, tokens)
	meta := map[string]string{"field": pointer}
	switch {
	case v == nil:
		return nil, newError(ReasonKeyFieldMissing, "arguments: key field "+pointer+" is missing; every key field must be present", meta)
	case v.kind == kindNull:
		return nil, newError(ReasonKeyFieldNull, "arguments: key field "+pointer+" is null; a null identifies nothing", meta)
	}
	if at := firstUnsafeInteger(v, pointer); at != "" {
		return nil, newError(ReasonKeyFieldUnsafeInteger, "arguments: key field "+pointer+" holds an integer beyond ±(2^53-1) at "+at+"; send it as a string", map[string]string{"field": at})
	}
	return v, nil
}

// checkDerivation re-checks the derivation at every call, never trusting it:
// no fields, bad version, bad context field, then each pointer in order.
func checkDerivation(d Derivation) ([][]string, *Error) {
	if len(d.Fields) == 0 {
		return nil, newError(ReasonNoFields, "key.fields is empty: an Idempotent tool must name at least one argument field", map[string]string{"field": "key.fields"})
	}
	if d.Version < 0 {
		return nil, newError(ReasonBadVersion, "key.version must be an integer ≥ 1 (0, not set, is 1)", map[string]string{"field": "key.version"})
	}
	for i, name := range d.ContextFields {
		if name != ContextRunID || indexOf(d.ContextFields, name) != i {
			return nil, newError(ReasonBadContextField, "key.context_fields["+strconv.Itoa(i)+"] must be run_id and appear once", nil)
		}
	}
	tokens := make([][]string, len(d.Fields))
	for i, pointer := range d.Fields {
		t, err := parsePointer(pointer)
		if err != nil {
			err.Metadata["field"] = "key.fields[" + strconv.Itoa(i) + "]"
			return nil, err
		}
		// RFC 6901 escaping is a bijection, so equal strings are equal pointers.
		if indexOf(d.Fields, pointer) != i {
			return nil, newError(ReasonDuplicateField, "key.fields["+strconv.Itoa(i)+"]: "+pointer+" is named more than once", map[string]string{"pointer": pointer})
		}
		tokens[i] = t
	}
	return tokens, nil
}

func namesRunID(d Derivation) bool { return indexOf(d.ContextFields, ContextRunID) >= 0 }

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

// quote writes a valid UTF-8 string as JSON; its escaping is irrelevant, JCS
// rewrites it.
func quote(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

// Validate checks a derivation alone, as the kernel does at registration and
// at every call: the reasons KEY_DERIVATION_NO_FIELDS, KEY_DERIVATION_BAD_VERSION,
// KEY_DERIVATION_BAD_CONTEXT_FIELD, INVALID_JSON_POINTER and
// KEY_DERIVATION_DUPLICATE_FIELD, as *Error.
func Validate(d Derivation) error {
	if _, err := checkDerivation(d); err != nil {
		return err
	}
	return nil
}
