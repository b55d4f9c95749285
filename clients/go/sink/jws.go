package sink

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"math"
	"strconv"
	"unicode/utf8"
)

// parsedJWS is a compact JWS split and decoded, not yet verified.
type parsedJWS struct {
	headerB64, payloadB64, signatureB64 string
	headerBytes, payloadBytes           []byte
	// header and payload are nil unless the bytes are a JSON object.
	header, payload map[string]any
}

type jwsProblem int

const (
	jwsOK jwsProblem = iota
	// Not three dot-separated base64url parts, header and payload non-empty.
	jwsNotCompact
	// Padding, a length of 1 mod 4, or non-zero bits past the last whole byte.
	jwsNotCanonical
)

const base64urlAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// parseCompactJWS is the profile's own strict parse (ledger compact-jws.ts):
// one spelling per token, so a token cannot be re-spelled under the same
// signature. The signature part may be empty so that `alg: none` is refused for
// its algorithm, the clearer reason.
func parseCompactJWS(token string) (*parsedJWS, jwsProblem) {
	parts := [3]string{}
	n := 0
	start := 0
	for i := 0; i <= len(token); i++ {
		if i == len(token) || token[i] == '.' {
			if n == 3 {
				return nil, jwsNotCompact
			}
			parts[n] = token[start:i]
			n++
			start = i + 1
			continue
		}
		if !isBase64urlChar(token[i]) {
			return nil, jwsNotCompact
		}
	}
	if n != 3 || parts[0] == "" || parts[1] == "" {
		return nil, jwsNotCompact
	}
	for _, p := range parts {
		if !isCanonicalBase64url(p) {
			return nil, jwsNotCanonical
		}
	}
	hb, _ := base64.RawURLEncoding.DecodeString(parts[0])
	pb, _ := base64.RawURLEncoding.DecodeString(parts[1])
	return &parsedJWS{
		headerB64: parts[0], payloadB64: parts[1], signatureB64: parts[2],
		headerBytes: hb, payloadBytes: pb,
		header: parseJSONObject(hb), payload: parseJSONObject(pb),
	}, jwsOK
}

func isBase64urlChar(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// isCanonicalBase64url: unpadded, a length that is not 1 mod 4, zero bits past
// the last whole byte (s is already known to be base64url characters).
func isCanonicalBase64url(s string) bool {
	rest := len(s) % 4
	if rest == 0 {
		return true
	}
	if rest == 1 {
		return false
	}
	last := bytes.IndexByte([]byte(base64urlAlphabet), s[len(s)-1])
	mask := 0x03
	if rest == 2 {
		mask = 0x0f
	}
	return last&mask == 0
}

// parseJSONObject reads bytes as the ledger does (lenient UTF-8, then
// JSON.parse): numbers stay float64 as in JavaScript, an overflowing number is
// ±Inf rather than an error, duplicate members keep the last value. Nil unless
// a JSON object.
func parseJSONObject(b []byte) map[string]any {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	return jsNumbers(obj).(map[string]any)
}

// jsNumbers turns json.Number into float64 the way JSON.parse does.
func jsNumbers(v any) any {
	switch t := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil && !math.IsInf(f, 0) {
			return math.NaN()
		}
		return f
	case map[string]any:
		for k, e := range t {
			t[k] = jsNumbers(e)
		}
		return t
	case []any:
		for i, e := range t {
			t[i] = jsNumbers(e)
		}
		return t
	}
	return v
}

// jsLength is JavaScript's String.length: UTF-16 code units.
func jsLength(s string) int {
	n := 0
	for _, r := range s {
		if r > 0xFFFF {
			n += 2
		} else {
			n++
		}
	}
	return n
}

func validUTF8(b []byte) bool { return utf8.Valid(b) }
