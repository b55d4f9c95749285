// Command payments is a small payments service protected by keycap's Go sink
// SDK: PaymentsService.Charge runs only under a genuine capability for the tool
// payments.charge, and the charge is deduplicated by the capability's key (the
// key the kernel derived from the order id), so a retried tool call can never
// charge twice.
//
//	go run ./examples/payments -listen 127.0.0.1:50070
//
// The kernel's keys come from -kernel (KEYCAP_KERNEL_ADDRESS, default
// 127.0.0.1:50051). With -mongodb (MONGODB_URI, as the services read it) and -database
// (KEYCAP_MONGODB_DATABASE, default keycap) the sink records its refusals in
// keycap's database, where `keycap rejections --service sink:payments` lists
// them, and remembers spent capabilities there.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"sync"

	paymentsv1 "github.com/keycap/keycap/clients/go/examples/payments/gen/payments/v1"
	"github.com/keycap/keycap/clients/go/sink"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// ChargeTool is the keycap tool this service performs.
const ChargeTool = "payments.charge"

// payments is the service: charges by capability key. A real one would keep
// them in its own database under a unique index on the key.
type payments struct {
	paymentsv1.UnimplementedPaymentsServiceServer
	mu      sync.Mutex
	charges map[string]*paymentsv1.ChargeResponse
}

func newPayments() *payments { return &payments{charges: map[string]*paymentsv1.ChargeResponse{}} }

func (p *payments) Charge(ctx context.Context, req *paymentsv1.ChargeRequest) (*paymentsv1.ChargeResponse, error) {
	// Only what the sink verified is trusted: the key comes from the capability,
	// never from the request.
	c, ok := sink.CapabilityFromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "Charge ran outside the keycap sink")
	}
	if req.GetCents() <= 0 {
		return nil, status.Error(codes.InvalidArgument, "cents must be positive")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if prev, ok := p.charges[c.Key]; ok {
		return &paymentsv1.ChargeResponse{ChargeId: prev.GetChargeId(), Duplicate: true, Cents: prev.GetCents()}, nil
	}
	sum := sha256.Sum256([]byte(c.Key))
	charge := &paymentsv1.ChargeResponse{ChargeId: "ch_" + hex.EncodeToString(sum[:8]), Cents: req.GetCents()}
	p.charges[c.Key] = charge
	return charge, nil
}

// newServer is the gRPC server with the sink's interceptor in front of every method.
func newServer(s *sink.Sink) *grpc.Server {
	srv := grpc.NewServer(grpc.UnaryInterceptor(s.UnaryServerInterceptor()))
	paymentsv1.RegisterPaymentsServiceServer(srv, newPayments())
	return srv
}

// config is what main reads from flags and the environment.
type config struct {
	listen, kernel, mongoURI, database string
}

// newSink connects the sink to the kernel's keys and, when configured, to keycap's database.
func newSink(ctx context.Context, cfg config) (*sink.Sink, func(), error) {
	conn, err := grpc.NewClient(cfg.kernel, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	keys := sink.NewKernelKeys(conn, sink.KernelKeysOptions{})
	if err := keys.Refresh(ctx); err != nil {
		log.Printf("payments: kernel keys not fetched yet (%v); requests wait for them", err)
	}
	opts := sink.Options{Name: "payments", Tools: []string{ChargeTool}, Keys: keys}
	closers := []func(){func() { _ = conn.Close() }}
	if cfg.mongoURI != "" {
		client, err := mongo.Connect(options.Client().ApplyURI(cfg.mongoURI))
		if err != nil {
			return nil, nil, err
		}
		db := client.Database(cfg.database)
		rec, err := sink.OpenMongoRecorder(ctx, db, "payments", sink.MongoRecorderOptions{})
		if err != nil {
			return nil, nil, err
		}
		spent, err := sink.OpenMongoSpentStore(ctx, db, sink.MongoSpentStoreOptions{})
		if err != nil {
			return nil, nil, err
		}
		opts.Recorder, opts.SpentStore = rec, spent
		closers = append(closers, spent.Close, func() { rec.Close(context.Background()) }, func() { _ = client.Disconnect(context.Background()) })
	}
	s, err := sink.New(opts)
	if err != nil {
		return nil, nil, err
	}
	return s, func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	var cfg config
	flag.StringVar(&cfg.listen, "listen", "127.0.0.1:50070", "address to serve PaymentsService on")
	flag.StringVar(&cfg.kernel, "kernel", envOr("KEYCAP_KERNEL_ADDRESS", "127.0.0.1:50051"), "kernel address (its signing keys)")
	flag.StringVar(&cfg.mongoURI, "mongodb", os.Getenv("MONGODB_URI"), "keycap's MongoDB, for refusal records and spent capabilities (optional)")
	flag.StringVar(&cfg.database, "database", envOr("KEYCAP_MONGODB_DATABASE", "keycap"), "keycap's database name")
	flag.Parse()
	ctx := context.Background()
	s, closeSink, err := newSink(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer closeSink()
	lis, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("payments: serving %s on %s (sink:%s)\n", ChargeTool, lis.Addr(), s.Name())
	if err := newServer(s).Serve(lis); err != nil {
		log.Fatal(err)
	}
}
