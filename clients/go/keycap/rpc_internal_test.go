package keycap

import (
	"testing"
	"time"
)

// The backoff between resends: doubling from 100 ms, capped at 2 s, each wait
// jittered to 50-100% of its value.
func TestRetryBackoffIsCappedAndJittered(t *testing.T) {
	for attempt, full := range []time.Duration{
		100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 2 * time.Second, 2 * time.Second,
	} {
		lo, hi := full, time.Duration(0)
		for range 200 {
			d := retryBackoff(attempt)
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo < full/2 || hi > full {
			t.Fatalf("attempt %d: waits in [%v, %v], want within [%v, %v]", attempt, lo, hi, full/2, full)
		}
		if hi-lo < full/10 {
			t.Fatalf("attempt %d: waits in [%v, %v]: not jittered", attempt, lo, hi)
		}
	}
	if d := retryBackoff(1000); d < time.Second || d > 2*time.Second {
		t.Fatalf("attempt 1000: %v, want the 2 s cap jittered", d)
	}
}
