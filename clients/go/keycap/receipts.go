package keycap

// Completion receipts (ADR 0035): the ledger answers a write whose entry
// completes its call with a receipt; the client forwards it with its next
// BeginCalls, so the kernel settles that call without reading the entry back.
// Only batches carry receipts; a receipt never sent (the client's last calls,
// WithoutBatching) only means the kernel reads that entry.

import (
	"sync"

	effectv1 "github.com/keycap/keycap/clients/go/gen/keycap/effect/v1"
)

// maxReceipts is the most receipts held for the next BeginCalls: the kernel's
// limit per request. Beyond it the oldest are dropped (a read, never a call).
const maxReceipts = 1024

type receipts struct {
	mu   sync.Mutex
	held []*effectv1.CompletionReceipt
}

func (r *receipts) add(receipt *effectv1.CompletionReceipt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held = append(r.held, receipt)
	if n := len(r.held); n > maxReceipts {
		r.held = append([]*effectv1.CompletionReceipt(nil), r.held[n-maxReceipts:]...)
	}
}

func (r *receipts) take() []*effectv1.CompletionReceipt {
	r.mu.Lock()
	defer r.mu.Unlock()
	taken := r.held
	r.held = nil
	return taken
}
