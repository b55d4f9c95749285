package sink_test

// End to end against a real keycap stack: genuine capabilities from the kernel,
// a real gRPC server behind the interceptor and a real HTTP server behind the
// middleware, forgeries compared with what the ledger answers for the same
// token, and the refusals read back through `keycap rejections`.

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kernelv1 "github.com/keycap/keycap/clients/go/gen/keycap/kernel/v1"
	ledgerv1 "github.com/keycap/keycap/clients/go/gen/keycap/ledger/v1"
	"github.com/keycap/keycap/clients/go/internal/e2estack"
	"github.com/keycap/keycap/clients/go/keycap"
	"github.com/keycap/keycap/clients/go/sink"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

var (
	stack *e2estack.Stack
	db    *mongo.Database
)

func TestMain(m *testing.M) {
	s, err := e2estack.Start(e2estack.StartTimeout())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stack = s
	client, err := mongo.Connect(options.Client().ApplyURI(s.MongoDBURI))
	if err != nil {
		s.Stop()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	db = client.Database(s.MongoDBDatabase)
	code := m.Run()
	if code != 0 && os.Getenv("KEYCAP_E2E_LOGS") != "" {
		fmt.Fprintf(os.Stderr, "--- e2e-stack stderr ---\n%s", s.Logs())
	}
	_ = client.Disconnect(context.Background())
	s.Stop()
	os.Exit(code)
}

func suffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// fixture: three tools registered with the Go client, a sink serving two of
// them, its gRPC and HTTP servers, and a ledger client to compare with.
type fixture struct {
	kernel               *keycap.KernelClient
	ledger               *keycap.LedgerClient
	charge, email, other string
	name                 string
	sink                 *sink.Sink
	grpcConn             *grpc.ClientConn
	http                 *httptest.Server
	refused              chan sink.RefusalEvent
	keysConn             *grpc.ClientConn
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	kernel, err := keycap.NewKernelClient(stack.Kernel, keycap.WithToken(stack.RuntimeToken), keycap.WithLedger(stack.Ledger))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kernel.Close() })
	ledger, err := keycap.NewLedgerClient(stack.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ledger.Close() })
	id := suffix()
	f := &fixture{kernel: kernel, ledger: ledger, charge: "gosink.charge-" + id, email: "gosink.email-" + id, other: "gosink.other-" + id, name: "go-e2e-" + id}
	for _, tool := range []keycap.Tool{
		{ID: f.charge, Effect: keycap.Idempotent(keycap.KeyDerivation{Fields: []string{"/order_id"}})},
		{ID: f.email, Effect: keycap.Unsafe()},
		{ID: f.other, Effect: keycap.Idempotent(keycap.KeyDerivation{Fields: []string{"/order_id"}})},
	} {
		if _, err := kernel.RegisterTool(ctx, tool); err != nil {
			t.Fatalf("register %s: %v", tool.ID, err)
		}
	}
	f.keysConn, err = grpc.NewClient(stack.Kernel, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.keysConn.Close() })
	f.sink = f.newSink(t, sink.VerifierOptions{})
	f.grpcConn = serveGRPC(t, f.sink)
	f.http = httptest.NewServer(f.sink.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := sink.CapabilityFromContext(r.Context())
		if !ok {
			http.Error(w, "no capability", 500)
			return
		}
		_ = json.NewEncoder(w).Encode(c)
	})))
	t.Cleanup(f.http.Close)
	return f
}

// newSink builds a sink over the fixture's tools with the MongoDB stores.
func (f *fixture) newSink(t *testing.T, vopts sink.VerifierOptions) *sink.Sink {
	t.Helper()
	ctx := context.Background()
	spent, err := sink.OpenMongoSpentStore(ctx, db, sink.MongoSpentStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(spent.Close)
	rec, err := sink.OpenMongoRecorder(ctx, db, f.name, sink.MongoRecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close(context.Background()) })
	f.refused = make(chan sink.RefusalEvent, 100)
	refused := f.refused
	s, err := sink.New(sink.Options{
		Name: f.name, Tools: []string{f.charge, f.email},
		Keys:     sink.NewKernelKeys(f.keysConn, sink.KernelKeysOptions{}),
		Verifier: vopts, SpentStore: spent, Recorder: rec,
		OnRefusal: func(e sink.RefusalEvent) {
			select {
			case refused <- e:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// healthWithCapability answers Check with the admitted capability's key and
// tool in its response header: what the handler saw.
type healthWithCapability struct {
	healthpb.UnimplementedHealthServer
}

func (healthWithCapability) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	c, ok := sink.CapabilityFromContext(ctx)
	if !ok {
		return nil, fmt.Errorf("handler ran without a capability")
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-key", c.Key, "x-tool", c.ToolID, "x-jti", c.JTI))
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// Watch (a server stream) sends one answer naming the admitted capability's key.
func (healthWithCapability) Watch(_ *healthpb.HealthCheckRequest, stream grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	c, ok := sink.CapabilityFromContext(stream.Context())
	if !ok {
		return fmt.Errorf("stream handler ran without a capability")
	}
	_ = stream.SetHeader(metadata.Pairs("x-key", c.Key))
	return stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
}

func serveGRPC(t *testing.T, s *sink.Sink) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(s.UnaryServerInterceptor()), grpc.StreamInterceptor(s.StreamServerInterceptor()))
	healthpb.RegisterHealthServer(srv, healthWithCapability{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// begin mints a genuine capability.
func (f *fixture) begin(t *testing.T, tool string, args map[string]any) *kernelv1.BeginCallResponse {
	t.Helper()
	text, _ := json.Marshal(args)
	res, err := f.kernel.BeginCall(context.Background(), tool, string(text))
	if err != nil {
		t.Fatalf("begin %s: %v", tool, err)
	}
	if res.GetCapability() == "" {
		t.Fatal("no capability minted")
	}
	return res
}

// callGRPC presents token to the sink's gRPC server; it returns the key the
// handler saw, or the refusal.
func (f *fixture) callGRPC(t *testing.T, token string, idempotencyKey string) (string, *keycap.Error) {
	t.Helper()
	md := metadata.Pairs("authorization", "Bearer "+token)
	if idempotencyKey != "" {
		md.Append("idempotency-key", idempotencyKey)
	}
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 10*time.Second)
	defer cancel()
	var header metadata.MD
	_, err := healthpb.NewHealthClient(f.grpcConn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
	if err != nil {
		return "", keycap.FromError(err)
	}
	if k := header.Get("x-key"); len(k) > 0 {
		return k[0], nil
	}
	return "", nil
}

type httpAnswer struct {
	status  int
	header  http.Header
	problem sink.Problem
	cap     sink.Capability
}

func (f *fixture) callHTTP(t *testing.T, token string, idempotencyKey string) httpAnswer {
	t.Helper()
	req, _ := http.NewRequest("POST", f.http.URL+"/charges", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+token)
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	a := httpAnswer{status: res.StatusCode, header: res.Header}
	if res.StatusCode == 200 {
		if err := json.Unmarshal(body, &a.cap); err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
		return a
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("refusal content type %q", ct)
	}
	if err := json.Unmarshal(body, &a.problem); err != nil {
		t.Fatalf("problem %q: %v", body, err)
	}
	if a.problem.Status != res.StatusCode || a.problem.Type != "https://keycap.dev/reasons/"+a.problem.Reason || a.problem.Title != a.problem.Reason {
		t.Fatalf("problem body does not follow ADR 0013: %s", body)
	}
	if strings.Contains(string(body), token) {
		t.Fatal("the problem quotes the capability")
	}
	return a
}

// ledgerReason is the ledger's verdict on the same token (its Write).
func (f *fixture) ledgerReason(t *testing.T, token string, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &ledgerv1.WriteRequest{Key: key, Payload: []byte(`{"sink":"comparison"}`)}
	_, err := f.ledger.WriteWithCapabilityOnce(ctx, token, req)
	if err == nil {
		return ""
	}
	return keycap.FromError(err).Reason
}

func b64(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

func parts(t *testing.T, token string) (header, payload map[string]any) {
	t.Helper()
	p := strings.Split(token, ".")
	hb, _ := base64.RawURLEncoding.DecodeString(p[0])
	pb, _ := base64.RawURLEncoding.DecodeString(p[1])
	if json.Unmarshal(hb, &header) != nil || json.Unmarshal(pb, &payload) != nil {
		t.Fatal("genuine token does not decode")
	}
	return header, payload
}

// attackerKey is the vectors' "attacker" key: a real Ed25519 key keycap never trusted.
func attackerKey(t *testing.T) (ed25519.PrivateKey, string) {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", "..", "..", "test", "vectors", "capability-verification.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Keys map[string]map[string]string `json:"keys"`
	}
	_ = json.Unmarshal(text, &f)
	seed, _ := base64.RawURLEncoding.DecodeString(f.Keys["attacker"]["d"])
	return ed25519.NewKeyFromSeed(seed), f.Keys["attacker"]["kid"]
}

func TestGenuineCapabilityIsAdmittedAndTheHandlerSeesItsKey(t *testing.T) {
	f := newFixture(t)
	res := f.begin(t, f.charge, map[string]any{"order_id": "o-" + suffix(), "cents": 500})
	key, kerr := f.callGRPC(t, res.GetCapability(), "")
	if kerr != nil {
		t.Fatalf("gRPC refused a genuine capability: %v", kerr)
	}
	if key == "" || key != res.GetCall().GetKey() {
		t.Fatalf("handler saw key %q, the kernel derived %q", key, res.GetCall().GetKey())
	}
	// The same idempotent capability again, with its own key sent along: still admitted.
	if _, kerr := f.callGRPC(t, res.GetCapability(), res.GetCall().GetKey()); kerr != nil {
		t.Fatalf("refused a retry of an idempotent capability: %v", kerr)
	}
	a := f.callHTTP(t, res.GetCapability(), res.GetCall().GetKey())
	if a.status != 200 || a.cap.Key != res.GetCall().GetKey() || a.cap.ToolID != f.charge || a.cap.CallID != res.GetCall().GetCallId() {
		t.Fatalf("HTTP: status %d claims %+v", a.status, a.cap)
	}
	// Streams are admitted when they open.
	sctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+res.GetCapability())
	stream, err := healthpb.NewHealthClient(f.grpcConn).Watch(sctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("stream refused a genuine capability: %v", err)
	}
	if h, _ := stream.Header(); len(h.Get("x-key")) != 1 || h.Get("x-key")[0] != res.GetCall().GetKey() {
		t.Fatalf("stream handler saw %v", h.Get("x-key"))
	}
	bare, err := healthpb.NewHealthClient(f.grpcConn).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = bare.Recv()
	}
	if kerr := keycap.FromError(err); kerr == nil || kerr.Reason != sink.ReasonCapabilityMissing {
		t.Fatalf("stream without a capability: %v", err)
	}
	// The ledger accepts it too.
	if r := f.ledgerReason(t, res.GetCapability(), res.GetCall().GetKey()); r != "" {
		t.Fatalf("ledger refused the genuine capability: %s", r)
	}
}

func TestForgeriesAreRefusedWithTheLedgersReasonAndRecorded(t *testing.T) {
	f := newFixture(t)
	genuine := f.begin(t, f.charge, map[string]any{"order_id": "o-" + suffix()})
	token, key := genuine.GetCapability(), genuine.GetCall().GetKey()
	header, payload := parts(t, token)
	sig := strings.Split(token, ".")[2]

	tampered := map[string]any{}
	for k, v := range payload {
		tampered[k] = v
	}
	tampered["key"] = "another-order-key"
	attacker, attackerKid := attackerKey(t)
	signed := func(h, p map[string]any, priv ed25519.PrivateKey) string {
		in := b64(h) + "." + b64(p)
		return in + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, []byte(in)))
	}
	hs256 := func() string {
		h := map[string]any{"alg": "HS256", "typ": header["typ"], "kid": header["kid"]}
		in := b64(h) + "." + b64(payload)
		mac := hmac.New(sha256.New, []byte(header["kid"].(string)))
		mac.Write([]byte(in))
		return in + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
	}

	cases := []struct {
		name, token, want string
		code              codes.Code
	}{
		{"tampered payload", b64(header) + "." + b64(tampered) + "." + sig, sink.ReasonBadSignature, codes.Unauthenticated},
		{"alg none", b64(map[string]any{"alg": "none", "typ": header["typ"], "kid": header["kid"]}) + "." + b64(payload) + ".", sink.ReasonAlgorithmNotAllowed, codes.Unauthenticated},
		{"alg HS256", hs256(), sink.ReasonAlgorithmNotAllowed, codes.Unauthenticated},
		{"unknown kid, another key", signed(map[string]any{"alg": "EdDSA", "typ": header["typ"], "kid": attackerKid}, payload, attacker), sink.ReasonUnknownKeyID, codes.Unauthenticated},
		{"known kid, another key", signed(header, payload, attacker), sink.ReasonBadSignature, codes.Unauthenticated},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, kerr := f.callGRPC(t, c.token, "")
			if kerr == nil || kerr.Reason != c.want || kerr.Code != c.code || kerr.Domain != sink.Domain {
				t.Fatalf("gRPC: got %v, want %s", kerr, c.want)
			}
			if a := f.callHTTP(t, c.token, ""); a.status != 401 || a.problem.Reason != c.want || a.problem.Retryable {
				t.Fatalf("HTTP: %d %+v", a.status, a.problem)
			}
			if got := f.ledgerReason(t, c.token, key); got != c.want {
				t.Fatalf("the ledger says %s, the sink %s", got, c.want)
			}
		})
	}

	t.Run("wrong tool", func(t *testing.T) {
		other := f.begin(t, f.other, map[string]any{"order_id": "o-" + suffix()})
		_, kerr := f.callGRPC(t, other.GetCapability(), "")
		if kerr == nil || kerr.Reason != sink.ReasonToolNotAccepted || kerr.Code != codes.PermissionDenied {
			t.Fatalf("gRPC: %v", kerr)
		}
		if a := f.callHTTP(t, other.GetCapability(), ""); a.status != 403 || a.problem.Reason != sink.ReasonToolNotAccepted {
			t.Fatalf("HTTP: %d %+v", a.status, a.problem)
		}
	})

	t.Run("idempotency key mismatch", func(t *testing.T) {
		_, kerr := f.callGRPC(t, token, "not-the-kernels-key")
		if kerr == nil || kerr.Reason != sink.ReasonKeyMismatch || kerr.Code != codes.PermissionDenied {
			t.Fatalf("gRPC: %v", kerr)
		}
		if a := f.callHTTP(t, token, "not-the-kernels-key"); a.status != 403 || a.problem.Reason != sink.ReasonKeyMismatch {
			t.Fatalf("HTTP: %d %+v", a.status, a.problem)
		}
		if got := f.ledgerReason(t, token, "not-the-kernels-key"); got != sink.ReasonKeyMismatch {
			t.Fatalf("the ledger says %s", got)
		}
	})

	t.Run("reused unsafe capability", func(t *testing.T) {
		email := f.begin(t, f.email, map[string]any{"to": "a@example.test"})
		if _, kerr := f.callGRPC(t, email.GetCapability(), ""); kerr != nil {
			t.Fatalf("first use refused: %v", kerr)
		}
		_, kerr := f.callGRPC(t, email.GetCapability(), "")
		if kerr == nil || kerr.Reason != sink.ReasonCapabilityReused || kerr.Code != codes.PermissionDenied {
			t.Fatalf("second use over gRPC: %v", kerr)
		}
		if a := f.callHTTP(t, email.GetCapability(), ""); a.status != 403 || a.problem.Reason != sink.ReasonCapabilityReused {
			t.Fatalf("third use over HTTP: %d %+v", a.status, a.problem)
		}
		// The ledger spends it in its own store: first write admitted, second reused.
		if got := f.ledgerReason(t, email.GetCapability(), ""); got != "" {
			t.Fatalf("the ledger refused the first write: %s", got)
		}
		if got := f.ledgerReason(t, email.GetCapability(), ""); got != sink.ReasonCapabilityReused {
			t.Fatalf("the ledger says %s on the second write", got)
		}
	})

	t.Run("expired by the sink's clock", func(t *testing.T) {
		late := f.newSink(t, sink.VerifierOptions{Now: func() time.Time { return time.Now().Add(time.Hour) }})
		conn := serveGRPC(t, late)
		ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if kerr := keycap.FromError(err); kerr == nil || kerr.Reason != sink.ReasonExpired || kerr.Code != codes.Unauthenticated {
			t.Fatalf("gRPC: %v", err)
		}
		ev := lastRefusal(t, f.refused, sink.ReasonExpired)
		if !ev.ToolIDVerified || ev.ToolID != f.charge {
			t.Fatalf("an expired genuine capability names its tool as verified: %+v", ev)
		}
	})

	// Every refusal above is in keycap's refusal store under sink:<name>.
	rows := cliRejections(t, "sink:"+f.name)
	byReason := map[string]int{}
	for _, r := range rows {
		byReason[r.Reason]++
		if r.Service != "sink:"+f.name {
			t.Fatalf("record of another service: %+v", r)
		}
		if r.Reason == sink.ReasonKeyMismatch && (r.AttemptedKey != "not-the-kernels-key" || r.CapabilityKey != key || !r.ToolIDVerified || r.ToolID != f.charge) {
			t.Fatalf("KEY_MISMATCH record: %+v", r)
		}
		if r.Reason == sink.ReasonToolNotAccepted && (r.ToolID != f.other || !r.ToolIDVerified) {
			t.Fatalf("TOOL_NOT_ACCEPTED record: %+v", r)
		}
		if r.Reason == sink.ReasonBadSignature && r.ToolIDVerified {
			t.Fatalf("a forgery's tool id recorded as verified: %+v", r)
		}
	}
	want := map[string]int{
		sink.ReasonBadSignature: 4, sink.ReasonAlgorithmNotAllowed: 4, sink.ReasonUnknownKeyID: 2,
		sink.ReasonToolNotAccepted: 2, sink.ReasonKeyMismatch: 2, sink.ReasonCapabilityReused: 2, sink.ReasonExpired: 1,
	}
	for reason, n := range want {
		if byReason[reason] != n {
			t.Errorf("%s: %d records, want %d (all: %v)", reason, byReason[reason], n, byReason)
		}
	}
	for _, r := range rows {
		if r.Method != "/grpc.health.v1.Health/Check" && r.Method != "HTTP POST /charges" {
			t.Errorf("method %q", r.Method)
		}
	}
}

func TestUnreachableKernelIsRetryableNotAForgery(t *testing.T) {
	f := newFixture(t)
	genuine := f.begin(t, f.charge, map[string]any{"order_id": "o-" + suffix()})
	dead, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	rec, err := sink.OpenMongoRecorder(context.Background(), db, f.name, sink.MongoRecorderOptions{FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s, err := sink.New(sink.Options{Name: f.name, Tools: []string{f.charge}, Recorder: rec,
		Keys: sink.NewKernelKeys(dead, sink.KernelKeysOptions{FetchTimeout: time.Second})})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.HTTP(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { t.Error("handler ran") })))
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/charges", nil)
	req.Header.Set("Authorization", "Bearer "+genuine.GetCapability())
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var p sink.Problem
	_ = json.NewDecoder(res.Body).Decode(&p)
	if res.StatusCode != 503 || res.Header.Get("Retry-After") != "1" || p.Reason != sink.ReasonSigningKeysUnavailable || !p.Retryable {
		t.Fatalf("%d Retry-After %q %+v", res.StatusCode, res.Header.Get("Retry-After"), p)
	}
	// Not the caller's fault: counted in an UNAVAILABLE_REFUSALS summary, not recorded as a forgery.
	rec.Close(context.Background())
	var summarised int64
	for _, r := range cliRejections(t, "sink:"+f.name) {
		if r.Reason == sink.ReasonSigningKeysUnavailable {
			t.Fatalf("an availability refusal recorded one by one: %+v", r)
		}
		if r.Reason == sink.ReasonUnavailableRefusals {
			summarised += r.Count
		}
	}
	if summarised != 1 {
		t.Fatalf("UNAVAILABLE_REFUSALS count %d, want 1", summarised)
	}
}

func TestUnverifiedRefusalsPastTheLimitAreSummarised(t *testing.T) {
	ctx := context.Background()
	name := "go-rl-" + suffix()
	rec, err := sink.OpenMongoRecorder(ctx, db, name, sink.MongoRecorderOptions{UnverifiedPerMinute: 2, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s, err := sink.New(sink.Options{Name: name, Tools: []string{"t"}, Recorder: rec,
		Keys: sink.KeySourceFunc(func(context.Context, string) (ed25519.PublicKey, error) { return nil, nil })})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		_, err := s.Admit(ctx, sink.Request{Method: "HTTP POST /x", Peer: "192.0.2.7:4000", Authorization: []string{"Bearer not-a-jws"}})
		if err == nil {
			t.Fatal("admitted garbage")
		}
	}
	rec.Close(ctx)
	rows := cliRejections(t, "sink:"+name)
	individual, summarised := 0, int64(0)
	for _, r := range rows {
		switch r.Reason {
		case sink.ReasonCapabilityMalformed:
			individual++
		case sink.ReasonRateLimitedRefusals:
			summarised += r.Count
			if r.Peer != "192.0.2.7" {
				t.Fatalf("summary peer %q", r.Peer)
			}
		default:
			t.Fatalf("unexpected record %+v", r)
		}
	}
	if individual != 2 || summarised != 3 {
		t.Fatalf("%d individual records and %d summarised, want 2 and 3", individual, summarised)
	}
	// The recorder counted them as it wrote them (ADR 0025): GetStats sums these, not the records.
	var counters struct {
		ID       string           `bson:"_id"`
		Counts   map[string]int64 `bson:"counts"`
		ByReason []struct {
			K string `bson:"k"`
			N int64  `bson:"n"`
		} `bson:"by_reason"`
	}
	if err := db.Collection(sink.StatsCollection).FindOne(ctx, bson.D{{Key: "service", Value: "sink:" + name}}).Decode(&counters); err != nil {
		t.Fatalf("no counters of sink:%s: %v", name, err)
	}
	byReason := map[string]int64{}
	for _, c := range counters.ByReason {
		byReason[c.K] = c.N
	}
	if counters.Counts["rejections"] != 5 || byReason[sink.ReasonCapabilityMalformed] != 2 || byReason[sink.ReasonRateLimitedRefusals] != 3 {
		t.Fatalf("counters %+v, want 5 refusals: 2 CAPABILITY_MALFORMED and 3 RATE_LIMITED_REFUSALS", counters)
	}
}

// A refusal record and a summary are listed from their time buckets (ADR 0033):
// each carries lb, and its listing marks (4 levels × its scopes) are written
// before it, once per process and bucket.
func TestRefusalRecordsCarryTheirListingBuckets(t *testing.T) {
	ctx := context.Background()
	name := "go-lb-" + suffix()
	service := "sink:" + name
	tool := "gosink.lb-" + suffix()
	// A synthetic instant of its own (the day is random), so that no other test writes these buckets.
	var day [1]byte
	_, _ = rand.Read(day[:])
	clock := time.Date(2031, 1, 1, 3, 4, 5, 250e6, time.UTC).AddDate(0, 0, int(day[0]))
	open := func() *sink.MongoRecorder {
		rec, err := sink.OpenMongoRecorder(ctx, db, name, sink.MongoRecorderOptions{UnverifiedPerMinute: 1, FlushInterval: time.Hour, Now: func() time.Time { return clock }})
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	rec := open()
	defer rec.Close(ctx)
	t.Logf("MongoDB-protocol server: %s", stack.MongoBackend)

	// The indexes the listings read by.
	for coll, name := range map[string]string{sink.RejectionsCollection: "eq_lb", sink.ListingMarksCollection: "eq_up"} {
		specs, err := db.Collection(coll).Indexes().ListSpecifications(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, s := range specs {
			found = found || s.Name == name
		}
		if !found {
			t.Errorf("%s has no index %s", coll, name)
		}
	}

	marks := db.Collection(sink.ListingMarksCollection)
	rejections := db.Collection(sink.RejectionsCollection)
	second := clock.Format("20060102150405")
	idsOf := func(at string, scopes ...string) []string {
		var ids []string
		for i := 0; i < len(scopes); i += 2 {
			for _, l := range []struct {
				level  string
				digits int
			}{{"d", 8}, {"h", 10}, {"m", 12}, {"s", 14}} {
				ids = append(ids, sink.RejectionsCollection+"/"+scopes[i]+"/"+l.level+"/"+at[:l.digits]+"/"+scopes[i+1])
			}
		}
		return ids
	}
	type markDoc = sink.ListingMark
	marksIn := func(ids []string) map[string]markDoc {
		t.Helper()
		cur, err := marks.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
		if err != nil {
			t.Fatal(err)
		}
		var docs []markDoc
		if err := cur.All(ctx, &docs); err != nil {
			t.Fatal(err)
		}
		out := map[string]markDoc{}
		for _, d := range docs {
			out[d.ID] = d
		}
		return out
	}
	// expectMarks: exactly the marks MarksFor states (held to the shared vectors), with these ids.
	expectMarks := func(at time.Time, ids []string, scopes []sink.Scope) {
		t.Helper()
		got := marksIn(ids)
		want := sink.MarksFor(sink.RejectionsCollection, at, scopes)
		if len(got) != len(ids) || len(want) != len(ids) {
			t.Fatalf("%d of the marks %v written (MarksFor states %d)", len(got), ids, len(want))
		}
		for _, w := range want {
			g := got[w.ID]
			if g.Up != w.Up || g.Coll != w.Coll || g.Scope != w.Scope || g.Level != w.Level || !g.At.Equal(w.At) {
				t.Errorf("mark %s = %+v, want %+v", w.ID, g, w)
			}
		}
	}
	lbOf := func(filter bson.D) string {
		t.Helper()
		var doc struct {
			LB         string    `bson:"lb"`
			RejectedAt time.Time `bson:"rejected_at"`
		}
		if err := rejections.FindOne(ctx, filter).Decode(&doc); err != nil {
			t.Fatalf("no record %v: %v", filter, err)
		}
		if doc.LB != doc.RejectedAt.UTC().Format("20060102150405") {
			t.Errorf("lb %q of a record rejected at %s", doc.LB, doc.RejectedAt)
		}
		return doc.LB
	}

	// A refusal: lb, and 4 levels × 4 scopes (all, tool, reason, service).
	rec.Record(ctx, sink.RefusalRecord{Method: "HTTP POST /x", Reason: sink.ReasonKeyMismatch, Code: "PERMISSION_DENIED", ToolID: tool, ToolIDVerified: true, Peer: "192.0.2.9:1", CallID: "first"})
	if lb := lbOf(bson.D{{Key: "service", Value: service}, {Key: "call_id", Value: "first"}}); lb != second {
		t.Fatalf("lb %q, want %q", lb, second)
	}
	recordIDs := idsOf(second, "all", "", "tool", tool, "reason", sink.ReasonKeyMismatch, "service", service)
	recordScopes := sink.ScopesOf(sink.Scope{Scope: "tool", Value: tool}, sink.Scope{Scope: "reason", Value: sink.ReasonKeyMismatch}, sink.Scope{Scope: "service", Value: service})
	if len(recordIDs) != 16 || recordIDs[7] != "rejections/tool/s/"+second+"/"+tool {
		t.Fatalf("ids %v", recordIDs)
	}
	expectMarks(clock, recordIDs, recordScopes)

	// A second record in the same second inserts no marks: the process knows them. (Were they
	// inserted again, the ones removed here would be back.)
	if _, err := marks.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: recordIDs}}}}); err != nil {
		t.Fatal(err)
	}
	rec.Record(ctx, sink.RefusalRecord{Method: "HTTP POST /x", Reason: sink.ReasonKeyMismatch, Code: "PERMISSION_DENIED", ToolID: tool, ToolIDVerified: true, Peer: "192.0.2.9:1", CallID: "second"})
	lbOf(bson.D{{Key: "service", Value: service}, {Key: "call_id", Value: "second"}})
	if got := marksIn(recordIDs); len(got) != 0 {
		t.Fatalf("a record in an already marked second inserted marks: %v", got)
	}
	// Another process (a new recorder) does not know them: it inserts them all, unordered; those
	// that exist already are duplicates, which is success, not a lost record, and the missing
	// ones after them are written too.
	other := open()
	defer other.Close(ctx)
	if _, err := marks.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: []string{recordIDs[0], recordIDs[15]}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := marks.InsertOne(ctx, bson.D{{Key: "_id", Value: recordIDs[1]}, {Key: "up", Value: recordIDs[0]}, {Key: "coll", Value: "rejections"}, {Key: "scope", Value: "all"}, {Key: "level", Value: "h"}, {Key: "at", Value: clock.Truncate(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	other.Record(ctx, sink.RefusalRecord{Method: "HTTP POST /x", Reason: sink.ReasonKeyMismatch, Code: "PERMISSION_DENIED", ToolID: tool, ToolIDVerified: true, Peer: "192.0.2.9:1", CallID: "third"})
	lbOf(bson.D{{Key: "service", Value: service}, {Key: "call_id", Value: "third"}})
	expectMarks(clock, recordIDs, recordScopes)

	// The next second of the same minute: only its second marks are new.
	clock = clock.Add(time.Second)
	next := clock.Format("20060102150405")
	rec.Record(ctx, sink.RefusalRecord{Method: "HTTP POST /x", Reason: sink.ReasonKeyMismatch, Code: "PERMISSION_DENIED", ToolID: tool, ToolIDVerified: true, Peer: "192.0.2.9:1", CallID: "fourth"})
	if lb := lbOf(bson.D{{Key: "service", Value: service}, {Key: "call_id", Value: "fourth"}}); lb != next {
		t.Fatalf("lb %q, want %q", lb, next)
	}
	expectMarks(clock, idsOf(next, "all", "", "tool", tool, "reason", sink.ReasonKeyMismatch, "service", service), recordScopes)

	// A summary (rate limited: one unverified record per minute, the next summarised): lb from
	// its rejected_at, and 4 levels × 3 scopes (all, reason, service; it has no tool).
	clock = clock.Add(2 * time.Second)
	summarySecond := clock.Format("20060102150405")
	for _, call := range []string{"u1", "u2"} {
		rec.Record(ctx, sink.RefusalRecord{Method: "HTTP POST /x", Reason: sink.ReasonCapabilityMalformed, Code: "UNAUTHENTICATED", Peer: "192.0.2.10:1", CallID: call})
	}
	rec.Flush(ctx)
	if lb := lbOf(bson.D{{Key: "service", Value: service}, {Key: "reason", Value: sink.ReasonRateLimitedRefusals}}); lb != summarySecond {
		t.Fatalf("summary lb %q, want %q", lb, summarySecond)
	}
	summaryIDs := idsOf(summarySecond, "all", "", "reason", sink.ReasonRateLimitedRefusals, "service", service)
	expectMarks(clock, summaryIDs, sink.ScopesOf(sink.Scope{Scope: "reason", Value: sink.ReasonRateLimitedRefusals}, sink.Scope{Scope: "service", Value: service}))
}

// lastRefusal waits for the hook to report reason.
func lastRefusal(t *testing.T, ch chan sink.RefusalEvent, reason string) sink.RefusalEvent {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case e := <-ch:
			if e.Refusal.Reason == reason {
				return e
			}
		case <-deadline:
			t.Fatalf("no %s refusal reported", reason)
		}
	}
}

type rejectionRow struct {
	Service        string          `json:"service"`
	ToolID         string          `json:"toolId"`
	ToolIDVerified bool            `json:"toolIdVerified"`
	Reason         string          `json:"reason"`
	Code           string          `json:"code"`
	Method         string          `json:"method"`
	AttemptedKey   string          `json:"attemptedKey"`
	CapabilityKey  string          `json:"capabilityKey"`
	Peer           string          `json:"peer"`
	Count          int64           `json:"count"`
	RejectedAt     json.RawMessage `json:"rejectedAt"`
}

// cliRejections is `keycap rejections --service <service> --json`, as an operator runs it.
func cliRejections(t *testing.T, service string) []rejectionRow {
	t.Helper()
	root, err := e2estack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", filepath.Join(root, "dist", "services", "cli", "src", "main.js"),
		"rejections", "--service", service, "--json", "--limit", "1000", "--admin", stack.Admin)
	cmd.Env = append(os.Environ(), "KEYCAP_ADMIN_TOKEN="+stack.AdminToken)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("keycap rejections: %v\n%s", err, stderr)
	}
	var rows []rejectionRow
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("keycap rejections --json: %v\n%s", err, out)
	}
	return rows
}

func TestMongoSpentStoreDecidesRacesAndSweepsExpired(t *testing.T) {
	ctx := context.Background()
	clock := time.Now()
	store, err := sink.OpenMongoSpentStore(ctx, db, sink.MongoSpentStoreOptions{SweepInterval: -1, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	jti := "race-" + suffix()
	c := sink.SpentCapability{Sink: "go-spent", JTI: jti, ToolID: "t", CallID: "c", Effect: "unsafe", ExpiresAt: clock.Add(time.Minute)}
	results := make(chan bool, 8)
	for range 8 {
		go func() {
			first, err := store.Spend(ctx, c)
			if err != nil {
				t.Error(err)
			}
			results <- first
		}()
	}
	firsts := 0
	for range 8 {
		if <-results {
			firsts++
		}
	}
	if firsts != 1 {
		t.Fatalf("%d presentations spent it first", firsts)
	}
	var doc struct {
		Sink      string    `bson:"sink"`
		JTI       string    `bson:"jti"`
		Effect    string    `bson:"effect"`
		ExpiresAt time.Time `bson:"expires_at"`
	}
	if err := db.Collection(sink.SpentCollection).FindOne(ctx, map[string]string{"_id": "go-spent/" + jti}).Decode(&doc); err != nil || doc.JTI != jti || doc.Sink != "go-spent" || doc.Effect != "unsafe" {
		t.Fatalf("stored %+v %v", doc, err)
	}
	clock = clock.Add(2 * time.Minute)
	if n, err := store.Sweep(ctx); err != nil || n < 1 {
		t.Fatalf("swept %d: %v", n, err)
	}
	if first, err := store.Spend(ctx, c); err != nil || !first {
		// Past its expiry the capability is refused EXPIRED anyway; the record was gone.
		t.Fatalf("after the sweep: %v %v", first, err)
	}
}

// A shadow or replay capability the kernel minted is refused by the sink as if
// presented live, over gRPC and HTTP, even with the recorded live key beside it
// (ADR 0028): SANDBOX_CAPABILITY_NOT_LIVE, recorded against the verified tool,
// and the handler never runs.
func TestSandboxCapabilitiesAreRefusedAsNotLive(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	run := "gosink-rec-" + suffix()
	live, err := f.kernel.Begin(ctx, f.charge, map[string]any{"order_id": "S-1"}, keycap.WithRunID(run))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := live.Write(ctx, []byte("charged")); err != nil {
		t.Fatal(err)
	}
	replay, err := f.kernel.BeginCall(ctx, f.charge, `{"order_id":"S-1"}`, keycap.WithRunID(run+"-replay"), keycap.WithMode(keycap.Replay(run)))
	if err != nil {
		t.Fatal(err)
	}
	shadow, err := f.kernel.BeginCall(ctx, f.charge, `{"order_id":"S-1"}`, keycap.WithRunID(run+"-shadow"), keycap.WithMode(keycap.Shadow(run)))
	if err != nil {
		t.Fatal(err)
	}
	for mode, token := range map[string]string{"replay": replay.GetCapability(), "shadow": shadow.GetCapability()} {
		if _, kerr := f.callGRPC(t, token, live.Key()); kerr == nil || kerr.Reason != sink.ReasonSandboxCapabilityNotLive || kerr.Code != codes.PermissionDenied || kerr.Metadata["mode"] != mode {
			t.Fatalf("%s over gRPC: %v", mode, kerr)
		}
		if ev := lastRefusal(t, f.refused, sink.ReasonSandboxCapabilityNotLive); !ev.ToolIDVerified || ev.ToolID != f.charge {
			t.Fatalf("%s: the refusal names the verified tool: %+v", mode, ev)
		}
		if a := f.callHTTP(t, token, ""); a.status != 403 || a.problem.Reason != sink.ReasonSandboxCapabilityNotLive {
			t.Fatalf("%s over HTTP: %d %+v", mode, a.status, a.problem)
		}
		lastRefusal(t, f.refused, sink.ReasonSandboxCapabilityNotLive)
	}
	n := 0
	for _, r := range cliRejections(t, "sink:"+f.name) {
		if r.Reason == sink.ReasonSandboxCapabilityNotLive && r.ToolID == f.charge && r.ToolIDVerified {
			n += int(max(r.Count, 1))
		}
	}
	if n != 4 {
		t.Fatalf("SANDBOX_CAPABILITY_NOT_LIVE records against %s: %d, want 4", f.charge, n)
	}
}
