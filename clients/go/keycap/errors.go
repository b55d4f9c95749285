package keycap

import (
	"errors"
	"fmt"

	"github.com/keycap/keycap/clients/go/reasons"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the google.rpc.ErrorInfo domain of every keycap refusal.
const Domain = "keycap.dev"

// ClientDomain is the domain of a refusal this client makes before sending
// anything (a request rule written in proto/ that fails, ill-formed UTF-8, an
// oversized credential). Where a keycap service would refuse the same request,
// the reason is the one it would give.
const ClientDomain = "keycap.dev/client"

// Reasons a client commonly branches on (google.rpc.ErrorInfo.reason), kept here
// by name for the code that uses them; every reason of the catalogue, with its
// gRPC code, is in package reasons (generated from proto/keycap/rules/v1/reasons.proto).
// The services may send others; Error.Reason carries whatever was sent.
const (
	// The ledger: a write carried a key other than the capability's.
	ReasonKeyMismatch = reasons.KeyMismatch
	// The ledger: an Idempotent write carried no key.
	ReasonKeyMissing = reasons.KeyMissing
	// The ledger: a Queryable write carried another request id.
	ReasonRequestIDMismatch = reasons.RequestIDMismatch
	// The ledger: no capability was presented.
	ReasonCapabilityMissing = reasons.CapabilityMissing
	// The ledger: a single-use capability (Queryable, Unsafe) was used again.
	ReasonCapabilityReused = reasons.CapabilityReused
	// The ledger: the capability's signature did not verify.
	ReasonBadSignature = reasons.BadSignature
	// The ledger: the capability has expired.
	ReasonExpired = reasons.Expired
	// The ledger: the write's shape does not fit the capability's effect class.
	ReasonEffectClassMismatch = reasons.EffectClassMismatch
	// The kernel: an Unsafe call cannot be resumed automatically.
	ReasonUnsafeNotResumable = reasons.UnsafeNotResumable
	// The kernel: no bearer secret and no TLS client certificate was presented.
	ReasonPrincipalCredentialMissing = reasons.PrincipalCredentialMissing
	// The kernel: the bearer secret belongs to no principal (or several
	// authorization values were sent).
	ReasonPrincipalCredentialInvalid = reasons.PrincipalCredentialInvalid
	// The kernel: the principal was revoked.
	ReasonPrincipalRevoked = reasons.PrincipalRevoked
	// The kernel: the TLS client certificate maps to no principal.
	ReasonCertificateNotMapped = reasons.CertificateNotMapped
	// The kernel: the runtime neither owns the tool nor was granted it.
	ReasonToolNotGranted = reasons.ToolNotGranted
	// The kernel: the tool is registered by another principal.
	ReasonToolOwnedByOther = reasons.ToolOwnedByOther
	// The kernel: the RPC is for runtimes, and the caller is an operator.
	ReasonRuntimeRequired = reasons.RuntimeRequired
	// The kernel: the RPC needs an operator, and the caller is a runtime.
	ReasonOperatorRequired = reasons.OperatorRequired
	// Any service: a request rule written in proto/ failed, and the proto
	// states no reason for it (keycap.rules.v1). The rules' own reasons
	// (KEY_DERIVATION_REQUIRED, …) are read from the descriptors, not copied
	// here.
	ReasonRequestInvalid = reasons.RequestInvalid
)

// Error is every RPC failure this package returns: the gRPC code, and the
// reason, domain and metadata of the google.rpc.ErrorInfo read from the
// grpc-status-details-bin trailer, with its google.rpc.BadRequest field
// violations. When the server sent no ErrorInfo, Reason is the code's name
// (e.g. "UNAVAILABLE") and Domain is empty. A refusal made by this client
// before sending (Domain ClientDomain) has the same shape.
//
// Reach it with errors.As; the original gRPC error stays reachable through
// Unwrap, and status.FromError(err) keeps working because *Error implements
// GRPCStatus.
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Reason is the machine-readable cause, UPPER_SNAKE_CASE.
	Reason string
	// Domain is the ErrorInfo domain, normally Domain.
	Domain string
	// Metadata is the ErrorInfo metadata (never nil).
	Metadata map[string]string
	// Message is the human-readable status message. Do not branch on it.
	Message string
	// FieldViolations are the google.rpc.BadRequest field violations of an
	// INVALID_ARGUMENT refusal: one per failing rule, each with its proto
	// path. Nil when none was sent.
	FieldViolations []FieldViolation

	st    *status.Status
	cause error
}

// FieldViolation is one bad field of a refused request
// (google.rpc.BadRequest.FieldViolation).
type FieldViolation struct {
	// Field is the proto path of the field, e.g. "tool.tool_id" or
	// "tool.effect_class.idempotent.key.fields[1]".
	Field string
	// Description says what is wrong, for people. Do not branch on it.
	Description string
	// Reason is the machine-readable reason of this field's refusal
	// (UPPER_SNAKE_CASE), e.g. "INVALID_JSON_POINTER".
	Reason string
}

// Error implements error: "keycap: PERMISSION_DENIED KEY_MISMATCH: <message>".
func (e *Error) Error() string {
	if e.Reason == "" || e.Reason == codeName(e.Code) {
		return fmt.Sprintf("keycap: %s: %s", codeName(e.Code), e.Message)
	}
	return fmt.Sprintf("keycap: %s %s: %s", codeName(e.Code), e.Reason, e.Message)
}

// Unwrap returns the underlying error (the gRPC status error).
func (e *Error) Unwrap() error { return e.cause }

// GRPCStatus returns the status the error was built from, so that
// status.FromError and status.Code see through an *Error.
func (e *Error) GRPCStatus() *status.Status {
	if e.st != nil {
		return e.st
	}
	return status.New(e.Code, e.Message)
}

// CodeName is the gRPC code's canonical name, e.g. "PERMISSION_DENIED".
func (e *Error) CodeName() string { return codeName(e.Code) }

// ReasonOf returns the keycap reason of err (or of the *Error it wraps), and ""
// when err is nil or carries none.
func ReasonOf(err error) string {
	var kerr *Error
	if errors.As(err, &kerr) {
		return kerr.Reason
	}
	return ""
}

// FromError normalises any error into a *Error: an *Error already in the chain
// is returned as is; a gRPC status error is read, ErrorInfo included;
// anything else becomes codes.Unknown with reason "UNKNOWN". nil stays nil.
func FromError(err error) *Error {
	if err == nil {
		return nil
	}
	var kerr *Error
	if errors.As(err, &kerr) {
		return kerr
	}
	st, ok := status.FromError(err)
	if !ok {
		return &Error{Code: codes.Unknown, Reason: "UNKNOWN", Metadata: map[string]string{}, Message: err.Error(), st: st, cause: err}
	}
	out := &Error{Code: st.Code(), Reason: codeName(st.Code()), Metadata: map[string]string{}, Message: st.Message(), st: st, cause: err}
	seenInfo, seenBadRequest := false, false
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if seenInfo {
				continue
			}
			seenInfo = true
			if d.GetReason() != "" {
				out.Reason = d.GetReason()
			}
			out.Domain = d.GetDomain()
			for k, v := range d.GetMetadata() {
				out.Metadata[k] = v
			}
		case *errdetails.BadRequest:
			if seenBadRequest {
				continue
			}
			seenBadRequest = true
			for _, v := range d.GetFieldViolations() {
				out.FieldViolations = append(out.FieldViolations, FieldViolation{Field: v.GetField(), Description: v.GetDescription(), Reason: v.GetReason()})
			}
		}
	}
	return out
}

// codeName is the canonical UPPER_SNAKE name of a code (codes.Code.String
// gives "PermissionDenied").
func codeName(c codes.Code) string {
	switch c {
	case codes.OK:
		return "OK"
	case codes.Canceled:
		return "CANCELLED"
	case codes.Unknown:
		return "UNKNOWN"
	case codes.InvalidArgument:
		return "INVALID_ARGUMENT"
	case codes.DeadlineExceeded:
		return "DEADLINE_EXCEEDED"
	case codes.NotFound:
		return "NOT_FOUND"
	case codes.AlreadyExists:
		return "ALREADY_EXISTS"
	case codes.PermissionDenied:
		return "PERMISSION_DENIED"
	case codes.ResourceExhausted:
		return "RESOURCE_EXHAUSTED"
	case codes.FailedPrecondition:
		return "FAILED_PRECONDITION"
	case codes.Aborted:
		return "ABORTED"
	case codes.OutOfRange:
		return "OUT_OF_RANGE"
	case codes.Unimplemented:
		return "UNIMPLEMENTED"
	case codes.Internal:
		return "INTERNAL"
	case codes.Unavailable:
		return "UNAVAILABLE"
	case codes.DataLoss:
		return "DATA_LOSS"
	case codes.Unauthenticated:
		return "UNAUTHENTICATED"
	default:
		return fmt.Sprintf("CODE(%d)", uint32(c))
	}
}
