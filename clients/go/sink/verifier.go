package sink

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Profile constants of ADR 0003, the ledger's defaults.
const (
	DefaultIssuer                = "keycap-kernel"
	DefaultAudience              = "keycap-ledger"
	DefaultMaxTokenBytes         = 4096
	DefaultMaxLifetimeSeconds    = 900
	DefaultClockToleranceSeconds = 5

	capabilityAlg = "EdDSA"
	capabilityTyp = "keycap-capability+jwt"
	// The typ of a shadow or replay capability (ADR 0028): a verifier that does
	// not know run modes refuses it WRONG_TOKEN_TYPE instead of taking it as live.
	capabilitySandboxTyp = "keycap-sandbox-capability+jwt"
)

// VerifierOptions are the ledger's verification options; zero values take the
// ledger's defaults.
type VerifierOptions struct {
	// Issuer expected in `iss`. Default "keycap-kernel".
	Issuer string
	// Audience expected in `aud` (the kernel's audience). Default "keycap-ledger".
	Audience string
	// MaxTokenBytes is the largest accepted token. Default 4096.
	MaxTokenBytes int
	// MaxLifetimeSeconds bounds `exp - iat` and the token's age. Default 900.
	MaxLifetimeSeconds int
	// ClockToleranceSeconds is the skew tolerated on exp, nbf and iat. Default
	// 5; set NoClockTolerance for none.
	ClockToleranceSeconds int
	NoClockTolerance      bool
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// VerifySandbox verifies shadow and replay capabilities (ADR 0028) and
	// returns their Mode, for a caller that then applies the mode (a Sink
	// refuses them SANDBOX_CAPABILITY_NOT_LIVE). Default false: their typ is
	// refused WRONG_TOKEN_TYPE, as by every verifier that does not know run
	// modes. Either way a token whose typ and mode claim disagree is refused
	// CLAIM_INVALID.
	VerifySandbox bool
}

func (o VerifierOptions) withDefaults() VerifierOptions {
	if o.Issuer == "" {
		o.Issuer = DefaultIssuer
	}
	if o.Audience == "" {
		o.Audience = DefaultAudience
	}
	if o.MaxTokenBytes <= 0 {
		o.MaxTokenBytes = DefaultMaxTokenBytes
	}
	if o.MaxLifetimeSeconds <= 0 {
		o.MaxLifetimeSeconds = DefaultMaxLifetimeSeconds
	}
	if o.NoClockTolerance {
		o.ClockToleranceSeconds = 0
	} else if o.ClockToleranceSeconds <= 0 {
		o.ClockToleranceSeconds = DefaultClockToleranceSeconds
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Verifier checks capabilities offline, with exactly the ledger's strict
// profile and reasons, in the ledger's order. It fails closed: anything not
// positively verified is a *Refusal.
type Verifier struct {
	keys KeySource
	opts VerifierOptions
}

// NewVerifier verifies against keys (NewKernelKeys or NewStaticKeys).
func NewVerifier(keys KeySource, opts VerifierOptions) (*Verifier, error) {
	if keys == nil {
		return nil, errors.New("sink: a key source is required")
	}
	return &Verifier{keys: keys, opts: opts.withDefaults()}, nil
}

// RFC 6750 §2.1: the scheme is case-insensitive, the credential a b64token.
var bearer = regexp.MustCompile(`^(?i:bearer) +([A-Za-z0-9\-._~+/]+=*) *$`)

// Verify checks a capability from an `authorization: Bearer <capability>`
// value; present=false means the request carried none. The error is always a
// *Refusal.
func (v *Verifier) Verify(ctx context.Context, authorization string, present bool) (*Capability, error) {
	c, r := v.verify(ctx, authorization, present)
	if r != nil {
		return nil, r
	}
	return c, nil
}

func (v *Verifier) verify(ctx context.Context, authorization string, present bool) (*Capability, *Refusal) {
	none := unverifiedInfo{}
	if !present || jsTrim(authorization) == "" {
		return nil, refuse(ReasonCapabilityMissing, "no capability: expected authorization: Bearer <capability>", none)
	}
	tooLarge := fmt.Sprintf("capability is larger than %d bytes", v.opts.MaxTokenBytes)
	// Checked before any parsing, so an oversized header costs nothing but its length.
	if jsLength(authorization) > v.opts.MaxTokenBytes+64 {
		return nil, refuse(ReasonCapabilityTooLarge, tooLarge, none)
	}
	m := bearer.FindStringSubmatch(authorization)
	if m == nil {
		return nil, refuse(ReasonCapabilityMalformed, "authorization is not a Bearer credential", none)
	}
	token := m[1]
	if len(token) > v.opts.MaxTokenBytes {
		return nil, refuse(ReasonCapabilityTooLarge, tooLarge, none)
	}

	jws, problem := parseCompactJWS(token)
	switch problem {
	case jwsNotCompact:
		return nil, refuse(ReasonCapabilityMalformed, "capability is not a compact JWS (three base64url parts)", none)
	case jwsNotCanonical:
		return nil, refuse(ReasonCapabilityMalformed, "capability is not canonical base64url", none)
	}
	u := readUnverifiedInfo(jws.header, jws.payload)
	h := jws.header
	if h == nil {
		return nil, refuse(ReasonCapabilityMalformed, "capability header is not a JSON object", u)
	}
	// The algorithm is decided here, never by the token.
	if alg, ok := h["alg"].(string); !ok || alg != capabilityAlg {
		return nil, refuse(ReasonAlgorithmNotAllowed, "capability algorithm must be "+capabilityAlg, u)
	}
	typ, _ := h["typ"].(string)
	if typ != capabilityTyp && !(typ == capabilitySandboxTyp && v.opts.VerifySandbox) {
		return nil, refuse(ReasonWrongTokenType, "capability typ must be "+capabilityTyp, u)
	}
	kid, ok := h["kid"].(string)
	if !ok || kid == "" {
		return nil, refuse(ReasonCapabilityMalformed, "capability header has no key id (kid)", u)
	}
	for member := range h {
		if member != "alg" && member != "typ" && member != "kid" {
			// jku, jwk, crit, b64…: something this profile never does.
			return nil, refuse(ReasonCapabilityMalformed, "capability header has a member that is not allowed", u)
		}
	}
	if jws.signatureB64 == "" {
		return nil, refuse(ReasonCapabilityMalformed, "capability has no signature", u)
	}

	key, err := v.keys.Key(ctx, kid)
	if err != nil {
		// Fail closed, but honestly: the sink could not check; not the caller's fault.
		r := unavailable(ReasonSigningKeysUnavailable, "the kernel's signing keys could not be fetched; retry", err)
		r.unverified = u
		return nil, r
	}
	if key == nil {
		return nil, refuse(ReasonUnknownKeyID, "capability is signed with a key id this sink does not know", u)
	}
	if len(key) != ed25519.PublicKeySize {
		return nil, refuse(ReasonBadSignature, "capability could not be verified", u)
	}
	// After the key lookup, so that a header with stray bytes keeps the reason
	// the ledger gives it (its typ, its unknown kid…).
	if !validUTF8(jws.headerBytes) {
		return nil, refuse(ReasonCapabilityMalformed, "capability header is not valid UTF-8", u)
	}
	sig, err := base64.RawURLEncoding.DecodeString(jws.signatureB64)
	if err != nil || !ed25519.Verify(key, []byte(jws.headerB64+"."+jws.payloadB64), sig) {
		return nil, refuse(ReasonBadSignature, "capability signature does not verify", u)
	}

	// From here on the claims are the kernel's own words.
	if jws.payload == nil || !validUTF8(jws.payloadBytes) {
		return nil, refuseVerified(ReasonCapabilityMalformed, "capability payload is not a JSON object", u, "")
	}
	c, r := v.checkClaims(jws.payload, u, kid)
	// The typ and the mode claim say the same thing, or the token is not the
	// kernel's kind: a live typ with a mode (a verifier without modes would take
	// it as live) or a sandbox typ without one.
	if r == nil && (typ == capabilitySandboxTyp) != (c.Mode != "") {
		return nil, refuseVerified(ReasonClaimInvalid, `capability claim "mode" must be present exactly when typ is `+capabilitySandboxTyp, u, "mode")
	}
	return c, r
}

// jsTrim is JavaScript's String.prototype.trim: its whitespace and line
// terminators, which are not Go's unicode.IsSpace.
func jsTrim(s string) string {
	isWS := func(r rune) bool {
		switch r {
		case '\t', '\n', '\v', '\f', '\r', ' ', 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF:
			return true
		}
		return r >= 0x2000 && r <= 0x200A
	}
	rs := []rune(s)
	i, j := 0, len(rs)
	for i < j && isWS(rs[i]) {
		i++
	}
	for j > i && isWS(rs[j-1]) {
		j--
	}
	return string(rs[i:j])
}
