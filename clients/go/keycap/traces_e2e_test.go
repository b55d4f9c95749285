package keycap_test

// Issue 13: with otelgrpc's stats handler passed through WithDialOptions, a Go caller's
// trace continues in the kernel (W3C traceparent). The stack exports its spans over
// OTLP/HTTP (JSON) to a real receiver in this test.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keycap/keycap/clients/go/internal/e2estack"
	"github.com/keycap/keycap/clients/go/keycap"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
)

type otlpSpan struct {
	TraceID      string `json:"traceId"`
	SpanID       string `json:"spanId"`
	ParentSpanID string `json:"parentSpanId"`
	Name         string `json:"name"`
	Kind         int    `json:"kind"`
}

type otlpReceiver struct {
	mu    sync.Mutex
	spans []otlpSpan
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var msg struct {
		ResourceSpans []struct {
			ScopeSpans []struct {
				Spans []otlpSpan `json:"spans"`
			} `json:"scopeSpans"`
		} `json:"resourceSpans"`
	}
	if req.URL.Path == "/v1/traces" && json.Unmarshal(body, &msg) == nil {
		r.mu.Lock()
		for _, rs := range msg.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
	}
	w.Header().Set("content-type", "application/json")
	_, _ = w.Write([]byte("{}"))
}

func (r *otlpReceiver) find(traceID, suffix string) *otlpSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.spans {
		s := r.spans[i]
		if s.TraceID == traceID && s.Kind == 2 && strings.HasSuffix(s.Name, suffix) {
			return &s
		}
	}
	return nil
}

func TestTraceContinuesFromAGoCallerIntoTheKernel(t *testing.T) {
	recv := &otlpReceiver{}
	srv := httptest.NewServer(recv)
	defer srv.Close()
	s, err := e2estack.StartWithEnv(e2estack.StartTimeout(),
		"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=http/json", "OTEL_EXPORTER_OTLP_ENDPOINT="+srv.URL,
		"OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_METRICS_EXPORTER=none", "OTEL_LOGS_EXPORTER=none")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	handler := otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(propagation.TraceContext{}))
	kernel, err := keycap.NewKernelClient(s.Kernel, keycap.WithToken(s.RuntimeToken), keycap.WithDialOptions(grpc.WithStatsHandler(handler)))
	if err != nil {
		t.Fatal(err)
	}
	defer kernel.Close()

	ctx, root := tp.Tracer("keycap-go-test").Start(context.Background(), "agent.go-call")
	_, err = kernel.BeginCall(ctx, "traces.go-unknown", `{"order":"g1"}`)
	root.End()
	if err == nil {
		t.Fatal("BeginCall of an unknown tool succeeded")
	}
	traceID := root.SpanContext().TraceID().String()
	var clientSpanID string
	for _, sp := range spans.Ended() {
		if sp.SpanKind().String() == "client" && sp.SpanContext().TraceID().String() == traceID {
			clientSpanID = sp.SpanContext().SpanID().String()
		}
	}
	if clientSpanID == "" {
		t.Fatal("otelgrpc recorded no client span in the caller's trace")
	}
	deadline := time.Now().Add(15 * time.Second)
	var server *otlpSpan
	for server == nil && time.Now().Before(deadline) {
		server = recv.find(traceID, "KernelService/BeginCall")
		time.Sleep(100 * time.Millisecond)
	}
	if server == nil {
		t.Fatalf("the kernel exported no BeginCall span in trace %s", traceID)
	}
	if server.ParentSpanID != clientSpanID {
		t.Fatalf("kernel span's parent = %s, want the Go client span %s", server.ParentSpanID, clientSpanID)
	}
}
