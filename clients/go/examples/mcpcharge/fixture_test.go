package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/keycap/keycap/clients/go/internal/e2estack"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// paymentsAPI is the Stripe-like API the example charges through: one charge
// per Idempotency-Key, every request counted.
type paymentsAPI struct {
	*httptest.Server
	mu       sync.Mutex
	requests int
	charges  map[string]json.RawMessage // by Idempotency-Key
	keys     []string                   // Idempotency-Key of each charge request, in order
	receipts int
}

func newPaymentsAPI(t *testing.T) *paymentsAPI {
	api := &paymentsAPI{charges: map[string]json.RawMessage{}}
	api.Server = httptest.NewServer(http.HandlerFunc(api.serve))
	t.Cleanup(api.Close)
	return api
}

func (a *paymentsAPI) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.requests++
	key := r.Header.Get("Idempotency-Key")
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	switch r.URL.Path {
	case "/v1/charges":
		a.keys = append(a.keys, key)
		if _, seen := a.charges[key]; !seen {
			body["id"] = fmt.Sprintf("ch_%d", len(a.charges)+1)
			a.charges[key], _ = json.Marshal(body)
		}
		_, _ = w.Write(a.charges[key])
	case "/v1/receipts":
		a.receipts++
		_, _ = fmt.Fprintf(w, `{"id":"rc_%d"}`, a.receipts)
	default:
		http.NotFound(w, r)
	}
}

func (a *paymentsAPI) snapshot() (requests int, keys []string, charges int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.requests, append([]string(nil), a.keys...), len(a.charges)
}

func suffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// buildExample compiles this example, as the gateway will run it.
func buildExample(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mcpcharge")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startGateway runs `keycap mcp --policy <file>` in front of the example and
// connects an MCP client to it over stdio, the way a desktop host does.
func startGateway(t *testing.T, name, bin, apiURL string) *mcp.ClientSession {
	t.Helper()
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	policy := fmt.Sprintf(`version: 1
upstreams:
  %s:
    command: %s
    args: ["-name", %s]
    env:
      KEYCAP_KERNEL_ADDRESS: %s
      PAYMENTS_API_URL: %s
      MONGODB_URI: %s
      KEYCAP_MONGODB_DATABASE: %s
    tools:
      charge: { class: idempotent, key: [/order_id, /amount_cents] }
      send_receipt: { class: unsafe }
`, name, q(bin), q(name), q(stack.Kernel), q(apiURL), q(stack.MongoDBURI), q(stack.MongoDBDatabase))
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	root, err := e2estack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", filepath.Join(root, "dist", "services", "cli", "src", "main.js"), "mcp", "--policy", file)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"KEYCAP_KERNEL_ADDRESS=" + stack.Kernel, "KEYCAP_RUNTIME_TOKEN=" + stack.RuntimeToken,
		"MONGODB_URI=" + stack.MongoDBURI, "KEYCAP_MONGODB_DATABASE=" + stack.MongoDBDatabase,
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "go-e2e-host", Version: "1.0.0"}, nil)
	session, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("keycap mcp did not start: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		_ = session.Close()
		if t.Failed() {
			t.Logf("keycap mcp stderr:\n%s", stderr.String())
		}
	})
	return session
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type rejectionRow struct {
	Service        string `json:"service"`
	ToolID         string `json:"toolId"`
	ToolIDVerified bool   `json:"toolIdVerified"`
	Reason         string `json:"reason"`
}

// rejections is `keycap rejections --service <service> --json`, as an operator runs it.
func rejections(t *testing.T, service string) []rejectionRow {
	t.Helper()
	root, _ := e2estack.RepoRoot()
	cmd := exec.Command("node", filepath.Join(root, "dist", "services", "cli", "src", "main.js"),
		"rejections", "--service", service, "--json", "--limit", "1000", "--admin", stack.Admin)
	cmd.Env = append(os.Environ(), "KEYCAP_ADMIN_TOKEN="+stack.AdminToken)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("keycap rejections: %v\n%s", err, stderr.String())
	}
	var rows []rejectionRow
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("keycap rejections --json: %v\n%s", err, out)
	}
	return rows
}
