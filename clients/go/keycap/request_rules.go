package keycap

// The request rules written in proto/ (protovalidate buf.validate annotations),
// checked before sending on every request whose message has any, with the
// reason the proto states beside each rule (keycap.rules.v1.field / .oneof,
// ADR 0010): the refusal the kernel would answer, read from the same
// descriptors (services/common/src/request-rules.ts does the same there).

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"unicode/utf8"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"buf.build/go/protovalidate"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	rulesv1 "github.com/keycap/keycap/clients/go/gen/keycap/rules/v1"
)

var (
	validator = sync.OnceValues(func() (protovalidate.Validator, error) { return protovalidate.New() })
	// hasRules caches, per request message, whether it or a message it
	// contains has a rule; requests without any (Write: the ledger's hot
	// path) are sent without going through the validator.
	hasRules sync.Map // protoreflect.MessageDescriptor -> bool
)

// checkRequest returns the refusal the request's rules produce, or nil when
// it has none or every rule holds. Like the services' refusal: INVALID_ARGUMENT,
// the first violation's reason, and one FieldViolation per failing rule, with
// its proto path (e.g. "tool.effect_class.idempotent.key.fields[1]").
func checkRequest(req proto.Message) *Error {
	if req == nil {
		return nil
	}
	m := req.ProtoReflect()
	if !m.IsValid() || !requestHasRules(m.Descriptor()) {
		return nil
	}
	v, err := validator()
	if err == nil {
		err = v.Validate(req)
	}
	if err == nil {
		return nil
	}
	var verr *protovalidate.ValidationError
	if !errors.As(err, &verr) || len(verr.Violations) == 0 {
		// A rule that does not compile or evaluate: a defect in proto/, not
		// in the request.
		return &Error{
			Code: codes.Internal, Reason: codeName(codes.Internal), Domain: ClientDomain, Metadata: map[string]string{},
			Message: "the request rules could not be checked (not sent): " + err.Error(), cause: err,
		}
	}
	out := make([]FieldViolation, 0, len(verr.Violations))
	for _, viol := range verr.Violations {
		out = append(out, fieldViolation(m.Descriptor(), viol))
	}
	first := out[0]
	return &Error{
		Code: codes.InvalidArgument, Reason: first.Reason, Domain: ClientDomain,
		Metadata:        map[string]string{"field": first.Field},
		Message:         first.Field + ": " + first.Description + " (not sent)",
		FieldViolations: out,
		cause:           err,
	}
}

// fieldViolation is one failing rule as the services report it.
func fieldViolation(root protoreflect.MessageDescriptor, v *protovalidate.Violation) FieldViolation {
	path := v.Proto.GetField()
	description := v.Proto.GetMessage()
	if got, ok := refusedValue(v); ok {
		description += " (got " + got + ")"
	}
	return FieldViolation{
		Field:       protovalidate.FieldPathString(path),
		Description: description,
		Reason:      reasonFor(root, path, v.Proto.GetRuleId()),
	}
}

// reasonFor is the reason the proto states for rule on the field or oneof at
// path (keycap.rules.v1), else ReasonRequestInvalid. A rule on a list's
// items reports the item's path ("fields[1]"); its reason sits on the list
// field, which is what that path element names. A field in a oneof also takes
// the oneof's reasons.
func reasonFor(root protoreflect.MessageDescriptor, path *validate.FieldPath, rule string) string {
	var refusals []*rulesv1.Refusal
	md := root
	elements := path.GetElements()
	for i, el := range elements {
		if md == nil {
			break
		}
		fd := md.Fields().ByNumber(protoreflect.FieldNumber(el.GetFieldNumber()))
		if fd == nil { // a oneof is named, not numbered
			fd = md.Fields().ByName(protoreflect.Name(el.GetFieldName()))
		}
		if i < len(elements)-1 {
			md = nil
			if fd != nil && fd.IsMap() {
				fd = fd.MapValue()
			}
			if fd != nil {
				md = fd.Message()
			}
			continue
		}
		switch {
		case fd != nil:
			refusals = append(refusals, proto.GetExtension(fd.Options(), rulesv1.E_Field).([]*rulesv1.Refusal)...)
			if o := fd.ContainingOneof(); o != nil && !o.IsSynthetic() {
				refusals = append(refusals, proto.GetExtension(o.Options(), rulesv1.E_Oneof).([]*rulesv1.Refusal)...)
			}
		default:
			if o := md.Oneofs().ByName(protoreflect.Name(el.GetFieldName())); o != nil {
				refusals = append(refusals, proto.GetExtension(o.Options(), rulesv1.E_Oneof).([]*rulesv1.Refusal)...)
			}
		}
	}
	for _, r := range refusals {
		if r.GetRule() == rule && r.GetReason() != "" {
			return r.GetReason()
		}
	}
	return ReasonRequestInvalid
}

// refusedValue is the refused value as JSON, as the services add it to a
// violation's description: a string or a number, of a list item or of a
// field that is set (an unset proto3 field, a map entry and a message show
// none).
func refusedValue(v *protovalidate.Violation) (string, bool) {
	elements := v.Proto.GetField().GetElements()
	if len(elements) == 0 || !v.FieldValue.IsValid() {
		return "", false
	}
	switch last, fd := elements[len(elements)-1], v.FieldDescriptor; {
	case last.HasIndex(): // a list item is always there
	case last.HasSubscript():
		return "", false
	case fd == nil || fd.IsList() || fd.IsMap():
		return "", false
	case !fd.HasPresence() && v.FieldValue.Equal(fd.Default()):
		return "", false
	}
	var x any
	switch val := v.FieldValue.Interface().(type) {
	case string:
		x = shown(val)
	case int32, uint32, float32, float64:
		x = val
	case protoreflect.EnumNumber:
		x = int32(val)
	default:
		return "", false
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(x); err != nil {
		return "", false
	}
	return strings.TrimSuffix(b.String(), "\n"), true
}

// requestHasRules reports whether md, or a message one of its fields holds
// (at any depth), carries a buf.validate rule. Cached per message.
func requestHasRules(md protoreflect.MessageDescriptor) bool {
	if known, ok := hasRules.Load(md); ok {
		return known.(bool)
	}
	found := searchRules(md, map[protoreflect.FullName]bool{})
	hasRules.Store(md, found)
	return found
}

func searchRules(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if seen[md.FullName()] {
		return false
	}
	seen[md.FullName()] = true
	if proto.HasExtension(md.Options(), validate.E_Message) {
		return true
	}
	for i := 0; i < md.Oneofs().Len(); i++ {
		if proto.HasExtension(md.Oneofs().Get(i).Options(), validate.E_Oneof) {
			return true
		}
	}
	for i := 0; i < md.Fields().Len(); i++ {
		fd := md.Fields().Get(i)
		if proto.HasExtension(fd.Options(), validate.E_Field) {
			return true
		}
		if fd.IsMap() {
			fd = fd.MapValue()
		}
		if sub := fd.Message(); sub != nil && searchRules(sub, seen) {
			return true
		}
	}
	return false
}

// maxShownChars is the longest string a refusal repeats after "got", in code
// points (then "…"), as the services: a refused value can be large (a 4 KiB detail).
const maxShownChars = 64

func shown(s string) string {
	if utf8.RuneCountInString(s) <= maxShownChars {
		return s
	}
	return string([]rune(s)[:maxShownChars]) + "…"
}
