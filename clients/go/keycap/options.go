package keycap

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// DefaultCallTimeout bounds each RPC whose context has no deadline of its own.
const DefaultCallTimeout = 10 * time.Second

// Option configures a client.
type Option func(*options)

type options struct {
	dial          []grpc.DialOption
	callTimeout   time.Duration
	ledgerAddress string
}

// WithDialOptions adds gRPC dial options (credentials, keepalive, interceptors).
// Without transport credentials among them the connection is plaintext, which
// suits loopback; pass grpc.WithTransportCredentials for anything else.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dial = append(o.dial, opts...) }
}

// WithCallTimeout sets the deadline applied to an RPC whose context has none.
// Default DefaultCallTimeout; 0 or less applies none.
func WithCallTimeout(d time.Duration) Option {
	return func(o *options) { o.callTimeout = d }
}

// WithLedger gives a KernelClient the ledger address its capability handles
// write to. Without it, handles cannot Write or Lookup.
func WithLedger(address string) Option {
	return func(o *options) { o.ledgerAddress = address }
}

func buildOptions(opts []Option) options {
	o := options{callTimeout: DefaultCallTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

func dial(address string, o options) (*grpc.ClientConn, error) {
	dopts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, o.dial...)
	conn, err := grpc.NewClient(address, dopts...)
	if err != nil {
		return nil, FromError(err)
	}
	return conn, nil
}

// invoke runs one unary RPC: the default deadline when ctx has none, the
// bearer credential (when not empty) as `authorization` metadata, and errors
// normalised to *Error.
func invoke[Req, Res any](
	ctx context.Context,
	timeout time.Duration,
	bearer string,
	method func(context.Context, Req, ...grpc.CallOption) (Res, error),
	req Req,
) (Res, error) {
	if _, ok := ctx.Deadline(); !ok && timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if bearer != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+bearer)
	}
	res, err := method(ctx, req)
	if err != nil {
		var zero Res
		return zero, FromError(err)
	}
	return res, nil
}
