package keycap

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	effectv1 "github.com/keycap/keycap/clients/go/gen/keycap/effect/v1"
	kernelv1 "github.com/keycap/keycap/clients/go/gen/keycap/kernel/v1"
	ledgerv1 "github.com/keycap/keycap/clients/go/gen/keycap/ledger/v1"
	"google.golang.org/protobuf/proto"
)

// ErrNoLedger is returned by CapabilityHandle.Write and Lookup when the
// KernelClient was created without WithLedger.
var ErrNoLedger = errors.New("keycap: KernelClient was created without WithLedger; handles cannot reach the ledger")

// CapabilityHandle is what a tool holds while it runs: the call's identity and
// a capability it cannot misuse. Write always sends the kernel-derived key (or
// request id) with the capability; there is no way to pass another key through
// it, and the capability itself never leaves the handle (its String and
// GoString redact it). Safe for concurrent use.
type CapabilityHandle struct {
	call       *kernelv1.Call
	capability string
	expiresAt  time.Time
	ledger     *LedgerClient
	kernel     *KernelClient
	recorded   *kernelv1.Call
	// completedByWrite: the ledger answered that its entry completes this
	// call (ADR 0034), so a success needs no CompleteCall.
	completedByWrite atomic.Bool
}

// Recorded is, in a replay, the recorded call this call matched, with the
// outcome the recorded run got (GetOutcome, GetOutcomeDetail); nil otherwise.
// A copy: changing it changes nothing in the handle.
func (h *CapabilityHandle) Recorded() *kernelv1.Call {
	if h.recorded == nil {
		return nil
	}
	return proto.Clone(h.recorded).(*kernelv1.Call)
}

// CallID is the journaled call's id.
func (h *CapabilityHandle) CallID() string { return h.call.GetCallId() }

// ToolID is the tool the call belongs to.
func (h *CapabilityHandle) ToolID() string { return h.call.GetToolId() }

// Key is the kernel-derived idempotency key ("" unless Idempotent).
func (h *CapabilityHandle) Key() string { return h.call.GetKey() }

// RequestID is the call's request id ("" unless Queryable).
func (h *CapabilityHandle) RequestID() string { return h.call.GetRequestId() }

// Attempt is 1 after Begin and grows with each Resume.
func (h *CapabilityHandle) Attempt() uint32 { return h.call.GetAttempt() }

// EffectKind is the effect kind the capability was minted for.
func (h *CapabilityHandle) EffectKind() effectv1.EffectKind { return h.call.GetEffectKind() }

// ExpiresAt is when the capability expires (zero if the kernel did not say).
func (h *CapabilityHandle) ExpiresAt() time.Time { return h.expiresAt }

// Call returns a copy of the journaled call.
func (h *CapabilityHandle) Call() *kernelv1.Call { return proto.Clone(h.call).(*kernelv1.Call) }

// Write records the effect in the ledger under the kernel's key (or request
// id). Writing again under an Idempotent capability returns the original entry
// with Duplicate set, and writes nothing. It waits for the ledger to be ready;
// an UNAVAILABLE answer is resent until the deadline for an Idempotent
// capability only (see LedgerClient.WriteWithCapabilityOnce): for a Queryable
// one, Lookup tells whether a write answered UNAVAILABLE took effect. When the
// answer's CompletesCall is set the entry completes the call (ADR 0034), and
// Complete answers a success itself.
func (h *CapabilityHandle) Write(ctx context.Context, payload []byte) (*ledgerv1.WriteResponse, error) {
	if h.ledger == nil {
		return nil, ErrNoLedger
	}
	// Only an Idempotent capability's write is resent after UNAVAILABLE. A
	// single-use one's is not: had the first try taken effect with only its
	// answer lost, the resend would be refused CAPABILITY_REUSED.
	policy := sendOnce
	if h.call.GetEffectKind() == effectv1.EffectKind_EFFECT_KIND_IDEMPOTENT {
		policy = retryUnavailable
	}
	res, err := h.ledger.write(ctx, h.capability, &ledgerv1.WriteRequest{
		Key: h.call.GetKey(), RequestId: h.call.GetRequestId(), Payload: payload,
	}, policy)
	if err == nil && res.GetCompletesCall() {
		h.completedByWrite.Store(true)
	}
	if receipt := res.GetCompletionReceipt(); err == nil && receipt != nil && h.kernel != nil && h.kernel.begins != nil {
		h.kernel.receipts.add(receipt)
	}
	return res, err
}

// CompletedByWrite reports whether the ledger answered that a Write's entry
// completes this call (ADR 0034): Complete(ctx, Succeeded, "") then sends no
// CompleteCall.
func (h *CapabilityHandle) CompletedByWrite() bool { return h.completedByWrite.Load() }

// Lookup (Queryable) asks the ledger whether this call's request took effect.
func (h *CapabilityHandle) Lookup(ctx context.Context) (*ledgerv1.LookupRequestResponse, error) {
	if h.ledger == nil {
		return nil, ErrNoLedger
	}
	return h.ledger.LookupWithCapability(ctx, h.capability, h.call.GetRequestId())
}

// Complete marks the call done in the kernel's journal. After a Write whose
// entry completes the call (CompletedByWrite, ADR 0034) a success with no
// detail is already recorded: it is answered here, with the call COMPLETED and
// SUCCEEDED, and no CompleteCall is sent (nor joins a CompleteCalls batch); the
// kernel settles the call from the entry. Failed, a detail, or a write that
// did not complete the call sends CompleteCall as before.
func (h *CapabilityHandle) Complete(ctx context.Context, outcome Outcome, detail string) (*kernelv1.CompleteCallResponse, error) {
	if h.completedByWrite.Load() && outcome == Succeeded && detail == "" {
		call := h.Call()
		call.State = kernelv1.CallState_CALL_STATE_COMPLETED
		call.Outcome = kernelv1.CallOutcome_CALL_OUTCOME_SUCCEEDED
		return &kernelv1.CompleteCallResponse{Call: call, AlreadyCompleted: false}, nil
	}
	return h.kernel.Complete(ctx, h.call.GetCallId(), outcome, detail)
}

// String describes the handle without its capability.
func (h *CapabilityHandle) String() string {
	return fmt.Sprintf("CapabilityHandle{tool=%s call=%s attempt=%d key=%s request_id=%s capability=REDACTED}",
		h.ToolID(), h.CallID(), h.Attempt(), h.Key(), h.RequestID())
}

// GoString is String, so %#v does not print the capability either.
func (h *CapabilityHandle) GoString() string { return h.String() }
