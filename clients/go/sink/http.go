package sink

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
)

// Problem is the RFC 9457 body of an HTTP refusal (ADR 0013 §8).
type Problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail"`
	Reason    string `json:"reason"`
	Retryable bool   `json:"retryable"`
}

// HTTPStatus maps a refusal's gRPC code to HTTP: 401 UNAUTHENTICATED, 403
// PERMISSION_DENIED, 503 UNAVAILABLE.
func (r *Refusal) HTTPStatus() int {
	switch r.Code {
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.InvalidArgument:
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// Problem is the refusal as an RFC 9457 problem.
func (r *Refusal) Problem() Problem {
	return Problem{
		Type: "https://keycap.dev/reasons/" + r.Reason, Title: r.Reason, Status: r.HTTPStatus(),
		Detail: r.Message, Reason: r.Reason, Retryable: r.Retryable(),
	}
}

// WriteProblem answers a refusal: its status, `Retry-After: 1` when retryable,
// and an application/problem+json body.
func WriteProblem(w http.ResponseWriter, r *Refusal) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if r.Retryable() {
		h.Set("Retry-After", "1")
	}
	if r.Code == codes.Unauthenticated {
		h.Set("WWW-Authenticate", `Bearer error="invalid_token"`)
	}
	w.WriteHeader(r.HTTPStatus())
	_ = json.NewEncoder(w).Encode(r.Problem())
}

// HTTP admits every request to next under a capability (the Authorization
// header, or Options.CapabilityHeader; `Idempotency-Key` when sent); a refusal
// is answered with WriteProblem and next does not run. next reads the claims
// with CapabilityFromContext(r.Context()).
func (s *Sink) HTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := s.Admit(r.Context(), s.httpRequest(r))
		if err != nil {
			var refusal *Refusal
			if !errors.As(err, &refusal) {
				refusal = unavailable(ReasonDatabaseUnavailable, "the sink could not decide; retry", err)
			}
			WriteProblem(w, refusal)
			return
		}
		next.ServeHTTP(w, r.WithContext(withCapability(r.Context(), c)))
	})
}

func (s *Sink) httpRequest(r *http.Request) Request {
	req := Request{Method: "HTTP " + r.Method + " " + r.URL.Path, Peer: r.RemoteAddr}
	values := append([]string(nil), r.Header.Values(s.opts.CapabilityHeader)...)
	if !strings.EqualFold(s.opts.CapabilityHeader, "Authorization") {
		// A header of its own carries the bare token or "Bearer <token>".
		for i, v := range values {
			if !bearer.MatchString(v) && strings.TrimSpace(v) != "" {
				values[i] = "Bearer " + v
			}
		}
	}
	req.Authorization = values
	if keys := r.Header.Values("Idempotency-Key"); len(keys) > 0 {
		req.IdempotencyKey, req.HasIdempotencyKey = keys[0], true
	}
	return req
}
