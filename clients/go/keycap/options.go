package keycap

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// DefaultCallTimeout bounds each RPC whose context has no deadline of its own.
const DefaultCallTimeout = 10 * time.Second

// Option configures a client.
type Option func(*options)

type options struct {
	dial          []grpc.DialOption
	callTimeout   time.Duration
	ledgerAddress string
	token         string
	tokenSet      bool
	tls           *TLSFiles
	runMode       RunMode
	noBatching    bool
	batchWrites   bool
}

// WithDialOptions adds gRPC dial options (keepalive, interceptors, or your own
// transport credentials, which override WithTLS). Without WithTLS or transport
// credentials among them the connection is plaintext, which suits loopback.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dial = append(o.dial, opts...) }
}

// WithCallTimeout sets the deadline applied to an RPC whose context has none.
// Default DefaultCallTimeout; 0 or less applies none. The deadline bounds the
// whole call: the wait for the service to be ready and the resends of
// UNAVAILABLE answers; with none, resends go on until ctx is cancelled.
func WithCallTimeout(d time.Duration) Option {
	return func(o *options) { o.callTimeout = d }
}

// WithoutBatching sends every BeginCall, CompleteCall and handle Write as its
// own RPC. By default calls made while one of their kind is in flight go
// together in the next BeginCalls / CompleteCalls (ADR 0022) / Writes (ADR
// 0037), each answered as if alone.
func WithoutBatching() Option {
	return func(o *options) { o.noBatching = true }
}

// WithBatchedWrites makes a LedgerClient send the writes made while one is in
// flight together, as one Writes (ADR 0037), each answered as if alone.
// Single-use capabilities' writes (WriteWithCapabilityOnce) and payloads above
// 16 KiB always go alone. A KernelClient's handles write this way unless it was
// given WithoutBatching.
func WithBatchedWrites() Option {
	return func(o *options) { o.batchWrites = true }
}

// WithLedger gives a KernelClient the ledger address its capability handles
// write to. Without it, handles cannot Write or Lookup. The ledger channel uses
// the same TLS settings (WithTLS, WithDialOptions) as the kernel's.
func WithLedger(address string) Option {
	return func(o *options) { o.ledgerAddress = address }
}

// WithToken sets the principal's bearer secret a KernelClient sends as
// `authorization: Bearer <token>` on every kernel call. Without this option
// the KernelClient uses RuntimeTokenFromEnv (KEYCAP_RUNTIME_TOKEN, else the
// file KEYCAP_RUNTIME_TOKEN_FILE names, else $KEYCAP_DATA_DIR/runtime-token).
// WithToken("") sends none: the principal is the one the TLS client
// certificate (WithTLS) is mapped to. Other clients ignore it (AccessClient and
// AdminClient take their credential as an argument; the ledger is shown
// capabilities, never this token).
func WithToken(token string) Option {
	return func(o *options) { o.token, o.tokenSet = token, true }
}

// WithTLS makes the client speak TLS: the server's certificate is verified
// against t.CAFile (pinned: the system roots are then not used), else against
// the system roots; t.CertFile and t.KeyFile present a client certificate
// (mTLS). Files are read when the client is made; a problem is a *ConfigError
// from the New...Client call. TLSFromEnv reads t from the environment.
func WithTLS(t TLSFiles) Option {
	return func(o *options) { o.tls = &t }
}

func buildOptions(opts []Option) options {
	o := options{callTimeout: DefaultCallTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

func dial(address string, o options, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	var transport credentials.TransportCredentials = insecure.NewCredentials()
	if o.tls != nil {
		creds, err := TLSCredentials(*o.tls)
		if err != nil {
			return nil, err
		}
		transport = creds
	}
	dopts := append([]grpc.DialOption{grpc.WithTransportCredentials(transport)}, extra...)
	dopts = append(dopts, o.dial...)
	conn, err := grpc.NewClient(address, dopts...)
	if err != nil {
		return nil, FromError(err)
	}
	return conn, nil
}

// bearerCredentials sends `authorization: Bearer <token>` on every RPC of a
// connection. It does not require TLS: the kernel on loopback is plaintext.
type bearerCredentials struct{ token string }

func (b bearerCredentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (bearerCredentials) RequireTransportSecurity() bool { return false }

// withBearer is the dial option that sends token on every call ("" sends none).
func withBearer(token string) []grpc.DialOption {
	if token == "" {
		return nil
	}
	return []grpc.DialOption{grpc.WithPerRPCCredentials(bearerCredentials{token: token})}
}
