// Command sink-bench measures what the Go sink SDK costs per request: one gRPC
// handler served twice on loopback, behind the sink's interceptor and bare,
// driven alternately (A/B rounds, same client, same concurrency) in one run;
// and the sink's admission alone (verification included) timed in one
// goroutine. Tokens are signed with the test kernel key of
// test/vectors/capability-verification.json and verified against its JWKS, so
// no stack is needed. It prints one JSON line:
//
//	{"language":"go","requests":N,"protected_per_s":…,"unprotected_per_s":…,"ratio":…,"verify_us_per_request":…}
//
// requests is how many calls each side served; ratio is protected/unprotected.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keycap/keycap/clients/go/internal/capsigner"
	"github.com/keycap/keycap/clients/go/sink"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

type result struct {
	Language         string  `json:"language"`
	Requests         int64   `json:"requests"`
	ProtectedPerS    float64 `json:"protected_per_s"`
	UnprotectedPerS  float64 `json:"unprotected_per_s"`
	Ratio            float64 `json:"ratio"`
	VerifyUsPerReq   float64 `json:"verify_us_per_request"`
	Concurrency      int     `json:"concurrency"`
	Rounds           int     `json:"rounds"`
	GOMAXPROCS       int     `json:"gomaxprocs"`
	VerifyIterations int     `json:"verify_iterations"`
}

// handler is the same for both servers: what a sink's own work would sit in.
type handler struct {
	healthpb.UnimplementedHealthServer
}

func (handler) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func serve(opts ...grpc.ServerOption) (string, func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, handler{})
	go func() { _ = srv.Serve(lis) }()
	return lis.Addr().String(), srv.Stop
}

// drive calls Check from `concurrency` goroutines for d, each call under the
// next token; it returns the calls completed.
func drive(client healthpb.HealthClient, tokens []string, concurrency int, d time.Duration) int64 {
	var done, next atomic.Int64
	var failed atomic.Value
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				tok := tokens[int(next.Add(1))%len(tokens)]
				ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
				if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					failed.Store(err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		log.Fatalf("sink-bench: a call failed: %v", err)
	}
	return done.Load()
}

func main() {
	rounds := flag.Int("rounds", 3, "A/B rounds (each drives both servers)")
	roundTime := flag.Duration("round", 2*time.Second, "time per server per round")
	concurrency := flag.Int("concurrency", 32, "calls in flight")
	verifyN := flag.Int("verify", 5000, "admissions timed alone")
	flag.Parse()

	signer, err := capsigner.Load("kernel-current")
	if err != nil {
		log.Fatal(err)
	}
	keys, err := sink.NewStaticKeys(signer.JWKS)
	if err != nil {
		log.Fatal(err)
	}
	s, err := sink.New(sink.Options{Name: "bench", Tools: []string{"bench.echo"}, Keys: keys})
	if err != nil {
		log.Fatal(err)
	}
	// Distinct idempotent capabilities, as distinct calls would bring.
	now := time.Now()
	tokens := make([]string, 4096)
	for i := range tokens {
		tokens[i] = signer.Sign(capsigner.Claims("bench.echo", "idempotent", fmt.Sprintf("bench-%d", i), now))
	}

	protectedAddr, stopP := serve(grpc.UnaryInterceptor(s.UnaryServerInterceptor()))
	defer stopP()
	bareAddr, stopB := serve()
	defer stopB()
	dial := func(addr string) healthpb.HealthClient {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			log.Fatal(err)
		}
		return healthpb.NewHealthClient(conn)
	}
	protected, bare := dial(protectedAddr), dial(bareAddr)
	// Warm up both (connections, first key parse).
	drive(protected, tokens, *concurrency, 200*time.Millisecond)
	drive(bare, tokens, *concurrency, 200*time.Millisecond)

	var pCalls, bCalls int64
	var pTime, bTime time.Duration
	for r := range *rounds {
		// Alternate which goes first, so drift in the machine's load hits both.
		order := []bool{true, false}
		if r%2 == 1 {
			order = []bool{false, true}
		}
		for _, isProtected := range order {
			start := time.Now()
			if isProtected {
				pCalls += drive(protected, tokens, *concurrency, *roundTime)
				pTime += time.Since(start)
			} else {
				bCalls += drive(bare, tokens, *concurrency, *roundTime)
				bTime += time.Since(start)
			}
		}
	}

	// Admission alone, one goroutine: the CPU a request spends in the sink.
	req := sink.Request{Method: "/grpc.health.v1.Health/Check", Peer: "127.0.0.1:1"}
	ctx := context.Background()
	start := time.Now()
	for i := range *verifyN {
		req.Authorization = []string{"Bearer " + tokens[i%len(tokens)]}
		if _, err := s.Admit(ctx, req); err != nil {
			log.Fatalf("sink-bench: admission refused a bench token: %v", err)
		}
	}
	verifyUs := float64(time.Since(start).Microseconds()) / float64(*verifyN)

	pRate := float64(pCalls) / pTime.Seconds()
	bRate := float64(bCalls) / bTime.Seconds()
	round := func(f float64, digits int) float64 { p := math.Pow(10, float64(digits)); return math.Round(f*p) / p }
	out, _ := json.Marshal(result{
		Language: "go", Requests: min(pCalls, bCalls), ProtectedPerS: round(pRate, 1), UnprotectedPerS: round(bRate, 1),
		Ratio: round(pRate/bRate, 3), VerifyUsPerReq: round(verifyUs, 2), Concurrency: *concurrency, Rounds: *rounds,
		GOMAXPROCS: runtime.GOMAXPROCS(0), VerifyIterations: *verifyN,
	})
	fmt.Fprintln(os.Stdout, string(out))
}
