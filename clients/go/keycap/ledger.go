package keycap

import (
	"context"

	ledgerv1 "github.com/keycap/keycap/clients/go/gen/keycap/ledger/v1"
	"google.golang.org/grpc"
)

// LedgerClient is the low-level client of keycap.ledger.v1.LedgerService.
// Tools normally write through a CapabilityHandle; this is for runtimes of
// other shapes and for tests that must misbehave on purpose (writing under a
// key of their own). Safe for concurrent use. Close it when done.
type LedgerClient struct {
	conn *grpc.ClientConn
	raw  ledgerv1.LedgerServiceClient
	o    options
	// Writes made while one is in flight, sent together as one Writes (ADR 0037); nil: one Write each.
	writes *coalescer[*capabilityWrite, *ledgerv1.WriteResponse]
}

// maxBatchedPayloadBytes is the largest payload a write may have to go in a
// Writes batch: 32 of them stay far below the ledger's floor for a batch (1 MiB).
const maxBatchedPayloadBytes = 16 * 1024

// capabilityWrite is one write waiting for a Writes batch: its capability travels in the item.
type capabilityWrite struct {
	capability string
	req        *ledgerv1.WriteRequest
}

// NewLedgerClient connects (lazily) to the ledger at address. Pass WithTLS
// when the listener serves TLS, WithBatchedWrites to send concurrent writes
// together (a KernelClient's handles do unless it was given WithoutBatching).
func NewLedgerClient(address string, opts ...Option) (*LedgerClient, error) {
	o := buildOptions(opts)
	conn, err := dial(address, o, explainErrors(ledgerService, address, o, false))
	if err != nil {
		return nil, err
	}
	c := &LedgerClient{conn: conn, raw: ledgerv1.NewLedgerServiceClient(conn), o: o}
	if o.batchWrites && !o.noBatching {
		c.writes = c.writeCoalescer()
	}
	return c, nil
}

func (c *LedgerClient) writeCoalescer() *coalescer[*capabilityWrite, *ledgerv1.WriteResponse] {
	return &coalescer[*capabilityWrite, *ledgerv1.WriteResponse]{
		timeout: c.o.callTimeout,
		one: func(ctx context.Context, w *capabilityWrite) (*ledgerv1.WriteResponse, error) {
			return call(ctx, c.o.callTimeout, w.capability, retryUnavailable, c.raw.Write, w.req)
		},
		batch: func(ctx context.Context, ws []*capabilityWrite) ([]itemAnswer[*ledgerv1.WriteResponse], error) {
			items := make([]*ledgerv1.CapabilityWrite, len(ws))
			for i, w := range ws {
				items[i] = &ledgerv1.CapabilityWrite{Capability: w.capability, Write: w.req}
			}
			// No bearer on the batch: each item names its own capability.
			res, err := invoke(ctx, c.o.callTimeout, "", c.raw.Writes, &ledgerv1.WritesRequest{Writes: items})
			return answersOf(res.GetResults(), (*ledgerv1.WriteResult).GetWritten), err
		},
	}
}

// Raw is the generated client. Its calls are sent as it sends them: no
// default deadline, no wait for the ledger to be ready, no resend.
func (c *LedgerClient) Raw() ledgerv1.LedgerServiceClient { return c.raw }

// Close closes the connection.
func (c *LedgerClient) Close() error { return c.conn.Close() }

// WriteWithCapability writes req presenting capability as
// `authorization: Bearer <capability>`; an empty capability sends none. Like
// every call of this package it waits for the ledger to be ready and resends
// an UNAVAILABLE answer until the deadline, which is right for an Idempotent
// capability (a resend under the same key writes nothing new). Write with a
// single-use (Unsafe, Queryable) capability through WriteWithCapabilityOnce.
func (c *LedgerClient) WriteWithCapability(ctx context.Context, capability string, req *ledgerv1.WriteRequest) (*ledgerv1.WriteResponse, error) {
	return c.write(ctx, capability, req, retryUnavailable)
}

// WriteWithCapabilityOnce is WriteWithCapability without the resend of an
// UNAVAILABLE answer (it still waits for the ledger to be ready): the write of
// a single-use (Unsafe, Queryable) capability, which a lost answer would make
// ambiguous to resend (the resend of a write that took effect is refused
// CAPABILITY_REUSED). After an UNAVAILABLE, a Queryable caller can ask
// LookupWithCapability whether the effect happened. CapabilityHandle.Write
// chooses between the two by the handle's effect kind.
func (c *LedgerClient) WriteWithCapabilityOnce(ctx context.Context, capability string, req *ledgerv1.WriteRequest) (*ledgerv1.WriteResponse, error) {
	return c.write(ctx, capability, req, sendOnce)
}

func (c *LedgerClient) write(ctx context.Context, capability string, req *ledgerv1.WriteRequest, policy retryPolicy) (*ledgerv1.WriteResponse, error) {
	if req == nil {
		req = &ledgerv1.WriteRequest{}
	}
	// Only a write that may be resent rides in a batch (never a single-use capability's), and only a small one.
	if c.writes != nil && policy == retryUnavailable && len(req.GetPayload()) <= maxBatchedPayloadBytes {
		return c.writes.submit(ctx, &capabilityWrite{capability: capability, req: req})
	}
	return call(ctx, c.o.callTimeout, capability, policy, c.raw.Write, req)
}

// LookupWithCapability asks whether the effect for requestID happened,
// presenting a Queryable capability for it.
func (c *LedgerClient) LookupWithCapability(ctx context.Context, capability string, requestID string) (*ledgerv1.LookupRequestResponse, error) {
	return invoke(ctx, c.o.callTimeout, capability, c.raw.LookupRequest, &ledgerv1.LookupRequestRequest{RequestId: requestID})
}
