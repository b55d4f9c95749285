package keycap

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Backoff between resends of a call answered UNAVAILABLE: the first wait,
// doubled after each resend up to the cap. Each wait is then jittered to
// 50-100% of that value, so that clients failed by the same outage do not all
// come back at the same instant.
const (
	firstRetryBackoff = 100 * time.Millisecond
	maxRetryBackoff   = 2 * time.Second
)

// MaxBearerBytes is the largest credential (capability or principal secret)
// the client sends. The services refuse anything over 4 KiB with a recorded
// reason; past ~64 KiB the HTTP/2 layer resets the stream before any handler
// sees it (a bare INTERNAL, nothing recorded), so larger ones are refused here.
const MaxBearerBytes = 16 * 1024

// retryPolicy says what call does with an UNAVAILABLE answer.
type retryPolicy int

const (
	// retryUnavailable resends the call until its deadline. UNAVAILABLE is
	// keycap's "retry" (the services also attach a google.rpc.RetryInfo to
	// it): the service could not do the work (its database is down, it is
	// restarting), so repeating a call that is safe to repeat is the answer.
	retryUnavailable retryPolicy = iota
	// sendOnce returns the first UNAVAILABLE as is. It is for the ledger
	// write of a single-use (Unsafe, Queryable) capability: had the first try
	// taken effect with only its answer lost, a resend would be refused
	// CAPABILITY_REUSED, and the caller could no longer tell whether the
	// effect happened. A Queryable caller asks the ledger (Lookup) instead.
	sendOnce
)

// invoke runs one unary RPC that is safe to repeat; see call.
func invoke[Req, Res any](
	ctx context.Context,
	timeout time.Duration,
	bearer string,
	method func(context.Context, Req, ...grpc.CallOption) (Res, error),
	req Req,
) (Res, error) {
	return call(ctx, timeout, bearer, retryUnavailable, method, req)
}

// call runs one unary RPC: the request's rules checked first (a request that
// breaks one is refused with the service's reason and not sent; see
// checkRequest), the default deadline when ctx has none, the bearer
// credential (when not empty) as `authorization` metadata, and errors
// normalised to *Error.
//
// The deadline covers the whole call, waits and resends included. Every try
// waits for the channel to be ready (grpc.WaitForReady): a service that is
// down or restarting is waited for within the deadline instead of failing the
// call at once, and nothing is sent before it is up. An UNAVAILABLE answer is
// resent after a capped, jittered exponential backoff unless policy is
// sendOnce, for as long as the next try would still start before the
// deadline; after that, or when ctx is cancelled, the last answer is returned.
// No other code is resent: they are the service's considered answer (INTERNAL
// and ABORTED included), and repeating the call would not change it or would
// be unsafe.
func call[Req, Res any](
	ctx context.Context,
	timeout time.Duration,
	bearer string,
	policy retryPolicy,
	method func(context.Context, Req, ...grpc.CallOption) (Res, error),
	req Req,
) (Res, error) {
	if m, ok := any(req).(proto.Message); ok {
		if refusal := checkRequest(m); refusal != nil {
			var zero Res
			return zero, refusal
		}
	}
	if _, ok := ctx.Deadline(); !ok && timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if bearer != "" {
		if len(bearer) > MaxBearerBytes {
			var zero Res
			return zero, &Error{
				Code: codes.InvalidArgument, Reason: "CAPABILITY_TOO_LARGE", Domain: ClientDomain, Metadata: map[string]string{},
				Message: fmt.Sprintf("the credential is %d bytes; keycap credentials are at most 4096 bytes, and this client sends none over %d (not sent)", len(bearer), MaxBearerBytes),
			}
		}
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+bearer)
	}
	deadline, hasDeadline := ctx.Deadline()
	for attempt := 0; ; attempt++ {
		res, err := method(ctx, req, grpc.WaitForReady(true))
		if err == nil {
			return res, nil
		}
		if policy == sendOnce || status.Code(err) != codes.Unavailable {
			var zero Res
			return zero, FromError(err)
		}
		wait := retryBackoff(attempt)
		// A try that could not start before the deadline would only turn the
		// service's answer into DEADLINE_EXCEEDED: return that answer instead.
		if hasDeadline && time.Until(deadline) <= wait {
			var zero Res
			return zero, FromError(err)
		}
		if !sleep(ctx, wait) {
			var zero Res
			return zero, FromError(err)
		}
	}
}

// retryBackoff is the wait before resend number attempt+1: firstRetryBackoff
// doubled attempt times, capped at maxRetryBackoff, times a random 50-100%.
func retryBackoff(attempt int) time.Duration {
	d := firstRetryBackoff
	for i := 0; i < attempt && d < maxRetryBackoff; i++ {
		d *= 2
	}
	d = min(d, maxRetryBackoff)
	return time.Duration(float64(d) * (0.5 + rand.Float64()/2))
}

// sleep waits d, and reports false when ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
