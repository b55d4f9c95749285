package sink

import (
	"fmt"

	"github.com/keycap/keycap/clients/go/reasons"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the google.rpc.ErrorInfo domain of every keycap refusal.
const Domain = "keycap.dev"

// Reasons a sink refuses with, beside the ledger's verification reasons
// (CAPABILITY_MISSING … SIGNING_KEYS_UNAVAILABLE): names of package reasons, generated
// from proto/keycap/rules/v1/reasons.proto with each one's gRPC code.
const (
	ReasonCapabilityMissing        = reasons.CapabilityMissing
	ReasonCapabilityMalformed      = reasons.CapabilityMalformed
	ReasonCapabilityTooLarge       = reasons.CapabilityTooLarge
	ReasonAlgorithmNotAllowed      = reasons.AlgorithmNotAllowed
	ReasonWrongTokenType           = reasons.WrongTokenType
	ReasonUnknownKeyID             = reasons.UnknownKeyID
	ReasonBadSignature             = reasons.BadSignature
	ReasonExpired                  = reasons.Expired
	ReasonNotYetValid              = reasons.NotYetValid
	ReasonWrongIssuer              = reasons.WrongIssuer
	ReasonWrongAudience            = reasons.WrongAudience
	ReasonClaimMissing             = reasons.ClaimMissing
	ReasonClaimInvalid             = reasons.ClaimInvalid
	ReasonLifetimeTooLong          = reasons.LifetimeTooLong
	ReasonSigningKeysUnavailable   = reasons.SigningKeysUnavailable
	ReasonToolNotAccepted          = reasons.ToolNotAccepted
	ReasonKeyMismatch              = reasons.KeyMismatch
	ReasonEffectClassMismatch      = reasons.EffectClassMismatch
	ReasonCapabilityReused         = reasons.CapabilityReused
	ReasonDatabaseUnavailable      = reasons.DatabaseUnavailable
	ReasonSandboxCapabilityNotLive = reasons.SandboxCapabilityNotLive
)

// Refusal is every admission failure: the gRPC code, the machine-readable
// reason, and a message that never quotes the capability. Reach it with
// errors.As; status.FromError(err) gives the status the ledger would send.
type Refusal struct {
	Code    codes.Code
	Reason  string
	Message string
	// Metadata of the ErrorInfo (e.g. "claim" for CLAIM_MISSING / CLAIM_INVALID).
	Metadata map[string]string
	// SignatureVerified: the refusal came after the signature held (expired,
	// wrong audience, a bad claim…), so the token's tool id is the kernel's word.
	SignatureVerified bool

	// Read from the token without trust, for the refusal record only.
	unverified unverifiedInfo
	cause      error
}

func (r *Refusal) Error() string { return fmt.Sprintf("%s: %s", r.Reason, r.Message) }

// Unwrap is the underlying failure of a store or key source, if any.
func (r *Refusal) Unwrap() error { return r.cause }

// Retryable: the sink could not decide (keys or store unavailable), which is
// not the caller's fault.
func (r *Refusal) Retryable() bool { return r.Code == codes.Unavailable }

// GRPCStatus is the status the ledger sends for the same refusal: the code
// with a google.rpc.ErrorInfo{reason, domain "keycap.dev"} detail.
func (r *Refusal) GRPCStatus() *status.Status {
	st := status.New(r.Code, r.Message)
	info := &errdetails.ErrorInfo{Reason: r.Reason, Domain: Domain}
	if len(r.Metadata) > 0 {
		info.Metadata = r.Metadata
	}
	if withInfo, err := st.WithDetails(info); err == nil {
		return withInfo
	}
	return st
}

// unverifiedInfo is what a token says about itself, read WITHOUT trust: only
// non-empty strings of at most 256 characters.
type unverifiedInfo struct {
	toolID, callID, jti, kid, effect, key, requestID string
}

const maxUnverifiedField = 256

func readUnverifiedInfo(header, payload map[string]any) unverifiedInfo {
	pick := func(src map[string]any, name string) string {
		s, ok := src[name].(string)
		if !ok || s == "" || jsLength(s) > maxUnverifiedField {
			return ""
		}
		return s
	}
	return unverifiedInfo{
		kid:       pick(header, "kid"),
		toolID:    pick(payload, "tool_id"),
		callID:    pick(payload, "call_id"),
		jti:       pick(payload, "jti"),
		effect:    pick(payload, "effect"),
		key:       pick(payload, "key"),
		requestID: pick(payload, "request_id"),
	}
}

func refuse(reason, message string, u unverifiedInfo) *Refusal {
	return &Refusal{Code: codes.Unauthenticated, Reason: reason, Message: message, unverified: u}
}

func refuseVerified(reason, message string, u unverifiedInfo, claim string) *Refusal {
	r := &Refusal{Code: codes.Unauthenticated, Reason: reason, Message: message, unverified: u, SignatureVerified: true}
	if claim != "" {
		r.Metadata = map[string]string{"claim": claim}
	}
	return r
}

func permissionDenied(reason, message string) *Refusal {
	return &Refusal{Code: codes.PermissionDenied, Reason: reason, Message: message}
}

func unavailable(reason, message string, cause error) *Refusal {
	return &Refusal{Code: codes.Unavailable, Reason: reason, Message: message, cause: cause}
}
