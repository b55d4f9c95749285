package sink

import (
	"math"
	"time"
)

// Capability is a verified capability: the kernel's claims and the id of the
// key that signed them. Only a Verifier makes one.
type Capability struct {
	Issuer   string `json:"iss"`
	Audience string `json:"aud"`
	// Subject is the principal (agent runtime) that began the call.
	Subject string `json:"sub"`
	ToolID  string `json:"tool_id"`
	// Effect is "idempotent", "queryable" or "unsafe".
	Effect  string `json:"effect"`
	CallID  string `json:"call_id"`
	Attempt int64  `json:"attempt"`
	JTI     string `json:"jti"`
	// Key is the kernel-derived idempotency key (idempotent only): the
	// handler's own unique key for the effect.
	Key string `json:"key,omitempty"`
	// RequestID is the request id (queryable only).
	RequestID string `json:"request_id,omitempty"`
	// Derivation is how Key was derived (idempotent only, ADR 0026): with the
	// call's arguments it lets a sink re-derive the key. Nil on capabilities
	// minted before the claim existed.
	Derivation *Derivation `json:"derivation,omitempty"`
	IssuedAt   int64       `json:"iat"`
	ExpiresAt  int64       `json:"exp"`
	KeyID      string      `json:"kid"`
	// Mode is "shadow" or "replay" for a sandbox capability (ADR 0028; only a
	// verifier with VerifySandbox returns one), "" for a live one.
	Mode string `json:"mode,omitempty"`
}

// Expiry is ExpiresAt as a time.
func (c *Capability) Expiry() time.Time { return time.Unix(c.ExpiresAt, 0) }

const (
	// Effect classes, as written in the `effect` claim.
	EffectIdempotent = "idempotent"
	EffectQueryable  = "queryable"
	EffectUnsafe     = "unsafe"

	// Sandbox run modes, as written in the `mode` claim (absent: live).
	ModeShadow = "shadow"
	ModeReplay = "replay"
)

// Presence is checked in this order before any value (the ledger's order, so a
// token missing several is refused naming the same one).
var presenceOrder = []string{"iss", "aud", "iat", "exp", "jti", "attempt", "call_id", "effect", "tool_id", "sub"}

// checkClaims is the ledger's claim rules in the ledger's order: presence,
// issuer, audience, the clock (nbf, exp, age, iat in the future), then the
// shared contract (types, pairing) and the lifetime. Runs only after the
// signature holds.
func (v *Verifier) checkClaims(p map[string]any, u unverifiedInfo, kid string) (*Capability, *Refusal) {
	for _, c := range presenceOrder {
		if _, ok := p[c]; !ok {
			return nil, refuseVerified(ReasonClaimMissing, `capability claim "`+c+`" is missing`, u, c)
		}
	}
	if s, ok := p["iss"].(string); !ok || s != v.opts.Issuer {
		return nil, refuseVerified(ReasonWrongIssuer, "capability was not issued by the expected kernel", u, "")
	}
	aud := p["aud"]
	audStr, audIsString := aud.(string)
	if !(audIsString && audStr == v.opts.Audience) && !arrayIncludes(aud, v.opts.Audience) {
		return nil, refuseVerified(ReasonWrongAudience, "capability is not addressed to this sink", u, "")
	}

	nowMs := v.opts.Now().UnixMilli()
	now := math.Floor(float64(nowMs) / 1000)
	tol := float64(v.opts.ClockToleranceSeconds)
	iat, ok := p["iat"].(float64)
	if !ok {
		return nil, refuseVerified(ReasonClaimInvalid, `capability claim "iat" must be a number`, u, "iat")
	}
	nbfRaw, hasNbf := p["nbf"]
	nbf, nbfIsNumber := nbfRaw.(float64)
	if hasNbf && !nbfIsNumber {
		return nil, refuseVerified(ReasonClaimInvalid, `capability claim "nbf" must be a number`, u, "nbf")
	}
	if hasNbf && nbf > now+tol {
		return nil, refuseVerified(ReasonNotYetValid, "capability is not valid yet (nbf)", u, "")
	}
	exp, ok := p["exp"].(float64)
	if !ok {
		return nil, refuseVerified(ReasonClaimInvalid, `capability claim "exp" must be a number`, u, "exp")
	}
	if exp <= now-tol {
		return nil, refuseVerified(ReasonExpired, "capability has expired", u, "")
	}
	// Age bounds replay of an old token even if its exp were far off.
	age := now - iat
	if age-tol > float64(v.opts.MaxLifetimeSeconds) {
		return nil, refuseVerified(ReasonExpired, "capability has expired", u, "")
	}
	if age < -tol {
		return nil, refuseVerified(ReasonNotYetValid, "capability is not valid yet (issued in the future)", u, "")
	}
	if !audIsString {
		// An array naming this audience passed above; the profile says one string.
		return nil, refuseVerified(ReasonWrongAudience, "capability audience must be a single string", u, "")
	}
	if kind, claim, detail := findClaimProblem(p); kind != "" {
		reason := ReasonClaimInvalid
		if kind == "missing" {
			reason = ReasonClaimMissing
		}
		return nil, refuseVerified(reason, detail, u, claim)
	}
	if exp-iat > float64(v.opts.MaxLifetimeSeconds) {
		return nil, refuseVerified(ReasonLifetimeTooLong, "capability lifetime exceeds the limit", u, "")
	}
	c := &Capability{
		Issuer: p["iss"].(string), Audience: audStr, Subject: p["sub"].(string),
		ToolID: p["tool_id"].(string), Effect: p["effect"].(string), CallID: p["call_id"].(string),
		Attempt: int64(p["attempt"].(float64)), JTI: p["jti"].(string),
		IssuedAt: int64(iat), ExpiresAt: int64(exp), KeyID: kid,
	}
	if k, ok := p["key"].(string); ok {
		c.Key = k
	}
	if r, ok := p["request_id"].(string); ok {
		c.RequestID = r
	}
	c.Derivation = derivationOf(p["derivation"])
	c.Mode, _ = p["mode"].(string)
	return c, nil
}

func arrayIncludes(v any, s string) bool {
	arr, ok := v.([]any)
	if !ok {
		return false
	}
	for _, e := range arr {
		if es, ok := e.(string); ok && es == s {
			return true
		}
	}
	return false
}

var requiredClaims = []string{"iss", "aud", "sub", "tool_id", "effect", "call_id", "attempt", "jti", "iat", "exp"}

// findClaimProblem is the contract's shape check (services/capability/src/claims.ts),
// the one the kernel's minter also applies.
func findClaimProblem(p map[string]any) (kind, claim, detail string) {
	for _, c := range requiredClaims {
		if _, ok := p[c]; !ok {
			return "missing", c, `capability claim "` + c + `" is missing`
		}
	}
	for _, c := range []string{"iss", "aud", "sub", "tool_id", "call_id", "jti"} {
		if s, ok := p[c].(string); !ok || s == "" {
			return "invalid", c, `capability claim "` + c + `" must be a non-empty string`
		}
	}
	effect, _ := p["effect"].(string)
	if effect != EffectIdempotent && effect != EffectQueryable && effect != EffectUnsafe {
		return "invalid", "effect", `capability claim "effect" must be one of idempotent, queryable, unsafe`
	}
	if a, ok := p["attempt"].(float64); !ok || !isSafeInteger(a) || a < 1 {
		return "invalid", "attempt", `capability claim "attempt" must be a positive integer`
	}
	for _, c := range []string{"iat", "exp"} {
		// Whole seconds only: the kernel never mints fractions.
		if t, ok := p[c].(float64); !ok || !isSafeInteger(t) || t < 0 {
			return "invalid", c, `capability claim "` + c + `" must be a whole number of seconds`
		}
	}
	if p["exp"].(float64) <= p["iat"].(float64) {
		return "invalid", "exp", `capability claim "exp" must be after "iat"`
	}
	if m, present := p["mode"]; present && m != ModeShadow && m != ModeReplay {
		return "invalid", "mode", `capability claim "mode" must be one of shadow, replay (absent: live)`
	}
	// The grant is the pairing of effect and key/request id.
	if kind, claim, detail := pairedClaimProblem(p, "key", effect == EffectIdempotent, EffectIdempotent); kind != "" {
		return kind, claim, detail
	}
	if detail := derivationProblem(p, effect == EffectIdempotent); detail != "" {
		return "invalid", "derivation", `capability claim "derivation" ` + detail
	}
	return pairedClaimProblem(p, "request_id", effect == EffectQueryable, EffectQueryable)
}

func pairedClaimProblem(p map[string]any, claim string, required bool, effect string) (kind, name, detail string) {
	v, present := p[claim]
	if required && !present {
		return "missing", claim, `capability claim "` + claim + `" is required when effect is ` + effect
	}
	if !required && present {
		return "invalid", claim, `capability claim "` + claim + `" is only allowed when effect is ` + effect
	}
	if s, ok := v.(string); present && (!ok || s == "") {
		return "invalid", claim, `capability claim "` + claim + `" must be a non-empty string`
	}
	return "", "", ""
}

func isSafeInteger(f float64) bool {
	return !math.IsNaN(f) && !math.IsInf(f, 0) && f == math.Trunc(f) && math.Abs(f) <= 1<<53-1
}
