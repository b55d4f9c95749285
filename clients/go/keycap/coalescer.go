package keycap

// Client-side group commit for BeginCall and CompleteCall (ADR 0022) and the
// ledger's Write (ADR 0037), as the TypeScript client does it: a call made
// while a request of its kind is in flight waits for that request and goes with
// the others that waited, as one BeginCalls / CompleteCalls / Writes batch; each is answered on its own, exactly as
// the unary RPC would have answered it. With nothing in flight a call is sent
// at once, alone, so an unloaded caller waits no longer than before; under
// load each waits at most for the request ahead of it, and the kernel sees one
// RPC per batch instead of one per call.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kernelv1 "github.com/keycap/keycap/clients/go/gen/keycap/kernel/v1"
)

// maxBatchCalls is the most calls one batch carries: the kernel's proto limit
// (repeated.max_items).
const maxBatchCalls = 256

// itemAnswer is one call's answer: the unary response, or its own error.
type itemAnswer[Res any] struct {
	res Res
	err error
}

type waiter[Req, Res any] struct {
	ctx  context.Context
	req  Req
	done chan itemAnswer[Res]
}

type coalescer[Req, Res any] struct {
	// one is the unary RPC, with the client's retries and default deadline.
	one func(ctx context.Context, req Req) (Res, error)
	// batch is the batch RPC; answers[i] answers reqs[i].
	batch   func(ctx context.Context, reqs []Req) ([]itemAnswer[Res], error)
	timeout time.Duration

	mu       sync.Mutex
	inFlight bool
	queue    []*waiter[Req, Res]
	// Set once a kernel answered UNIMPLEMENTED to the batch RPC (older than
	// ADR 0022): every call goes alone from then on.
	unsupported atomic.Bool
}

// submit sends req now when nothing of its kind is in flight, else with the
// next batch; it returns req's own answer.
func (c *coalescer[Req, Res]) submit(ctx context.Context, req Req) (Res, error) {
	if c.unsupported.Load() {
		return c.one(ctx, req)
	}
	c.mu.Lock()
	if !c.inFlight {
		c.inFlight = true
		c.mu.Unlock()
		defer c.next()
		return c.one(ctx, req)
	}
	w := &waiter[Req, Res]{ctx: ctx, req: req, done: make(chan itemAnswer[Res], 1)}
	c.queue = append(c.queue, w)
	c.mu.Unlock()
	select {
	case a := <-w.done:
		return a.res, a.err
	case <-ctx.Done():
		// The call may still go out with its batch: a BeginCall carries the
		// call id chosen here, so a retry finds the call it made.
		var zero Res
		return zero, FromError(status.FromContextError(ctx.Err()).Err())
	}
}

// next sends what waited while a request was in flight, as one batch, or
// marks nothing in flight when nothing waited.
func (c *coalescer[Req, Res]) next() {
	c.mu.Lock()
	if len(c.queue) == 0 {
		c.inFlight = false
		c.mu.Unlock()
		return
	}
	n := min(len(c.queue), maxBatchCalls)
	batch := c.queue[:n:n]
	c.queue = append([]*waiter[Req, Res](nil), c.queue[n:]...)
	c.mu.Unlock()
	go func() {
		defer c.next()
		c.send(batch)
	}()
}

func (c *coalescer[Req, Res]) send(batch []*waiter[Req, Res]) {
	if len(batch) == 1 || c.unsupported.Load() {
		c.alone(batch)
		return
	}
	reqs := make([]Req, len(batch))
	for i, w := range batch {
		reqs[i] = w.req
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	answers, err := c.batch(ctx, reqs)
	if err == nil && len(answers) != len(batch) {
		err = &Error{Code: codes.Internal, Reason: "BATCH_ANSWER_MISMATCH", Domain: ClientDomain, Metadata: map[string]string{},
			Message: "the server answered a batch with another number of results than calls"}
	}
	if err != nil {
		switch FromError(err).Code {
		case codes.Unimplemented:
			c.unsupported.Store(true)
			c.alone(batch)
		case codes.InvalidArgument, codes.ResourceExhausted:
			// Refused as a whole for something in its bytes or its size (a
			// server with a smaller message limit): each call alone gets the
			// answer that is its own.
			c.alone(batch)
		default:
			for _, w := range batch {
				w.done <- itemAnswer[Res]{err: err}
			}
		}
		return
	}
	var retries []*waiter[Req, Res]
	for i, w := range batch {
		// "Retry" for this call alone (the database was briefly away): the
		// unary RPC retries it with backoff, as it would have been alone.
		if answers[i].err != nil && FromError(answers[i].err).Code == codes.Unavailable {
			retries = append(retries, w)
			continue
		}
		w.done <- answers[i]
	}
	c.alone(retries)
}

func (c *coalescer[Req, Res]) alone(batch []*waiter[Req, Res]) {
	var wg sync.WaitGroup
	for _, w := range batch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.one(w.ctx, w.req)
			w.done <- itemAnswer[Res]{res: res, err: err}
		}()
	}
	wg.Wait()
}

func (c *KernelClient) beginCoalescer() *coalescer[*kernelv1.BeginCallRequest, *kernelv1.BeginCallResponse] {
	return &coalescer[*kernelv1.BeginCallRequest, *kernelv1.BeginCallResponse]{
		timeout: c.o.callTimeout,
		one: func(ctx context.Context, req *kernelv1.BeginCallRequest) (*kernelv1.BeginCallResponse, error) {
			return invoke(ctx, c.o.callTimeout, "", c.raw.BeginCall, req)
		},
		batch: func(ctx context.Context, reqs []*kernelv1.BeginCallRequest) ([]itemAnswer[*kernelv1.BeginCallResponse], error) {
			res, err := invoke(ctx, c.o.callTimeout, "", c.raw.BeginCalls, &kernelv1.BeginCallsRequest{Calls: reqs, Receipts: c.receipts.take()})
			return answersOf(res.GetResults(), (*kernelv1.BeginCallResult).GetBegun), err
		},
	}
}

func (c *KernelClient) completeCoalescer() *coalescer[*kernelv1.CompleteCallRequest, *kernelv1.CompleteCallResponse] {
	return &coalescer[*kernelv1.CompleteCallRequest, *kernelv1.CompleteCallResponse]{
		timeout: c.o.callTimeout,
		one: func(ctx context.Context, req *kernelv1.CompleteCallRequest) (*kernelv1.CompleteCallResponse, error) {
			return invoke(ctx, c.o.callTimeout, "", c.raw.CompleteCall, req)
		},
		batch: func(ctx context.Context, reqs []*kernelv1.CompleteCallRequest) ([]itemAnswer[*kernelv1.CompleteCallResponse], error) {
			res, err := invoke(ctx, c.o.callTimeout, "", c.raw.CompleteCalls, &kernelv1.CompleteCallsRequest{Calls: reqs})
			return answersOf(res.GetResults(), (*kernelv1.CompleteCallResult).GetCompleted), err
		},
	}
}

// answersOf reads a batch's results: each item's response, or the error its
// encoded status holds.
func answersOf[R interface{ GetErrorStatus() []byte }, Res comparable](results []R, response func(R) Res) []itemAnswer[Res] {
	out := make([]itemAnswer[Res], len(results))
	var none Res
	for i, r := range results {
		if v := response(r); v != none {
			out[i].res = v
		} else {
			out[i].err = statusError(r.GetErrorStatus())
		}
	}
	return out
}
