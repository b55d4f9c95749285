// Package e2estack starts a real keycap stack (MongoDB-protocol server,
// kernel, ledger, ledger admin) for the Go end-to-end tests, through the
// repository's `node dist/test/support/e2e-stack.js`. It is test support,
// internal to this module.
package e2estack

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Stack is a running keycap stack.
type Stack struct {
	// Kernel, Ledger and Admin are the listeners' host:port.
	Kernel string `json:"kernel"`
	Ledger string `json:"ledger"`
	Admin  string `json:"admin"`
	// AdminToken is the admin credential (on the kernel: the operator "admin").
	AdminToken string `json:"admin_token"`
	// RuntimeToken is the bearer secret of the runtime principal "local-runtime".
	RuntimeToken string `json:"runtime_token"`
	// MongoBackend names the MongoDB-protocol server used (mongod or ferretdb).
	MongoBackend string `json:"mongo_backend"`
	// MongoDBURI and MongoDBDatabase are where the services keep their data
	// (a sink records its refusals and spent capabilities there too).
	MongoDBURI      string `json:"mongodb_uri"`
	MongoDBDatabase string `json:"mongodb_database"`
	// DataDir is the services' KEYCAP_DATA_DIR.
	DataDir string `json:"data_dir"`
	// TLS is set on a stack from StartTLS: every listener serves TLS.
	TLS *TLS `json:"tls,omitempty"`

	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *lockedBuffer
	done   chan error
}

// TLS is the PKI of a stack from StartTLS. All three listeners serve TLS with a
// server certificate for 127.0.0.1 and localhost signed by CAFile; the kernel
// accepts (does not require) client certificates signed by it.
type TLS struct {
	// CAFile signs the server certificates and the client certificates.
	CAFile string `json:"ca_file"`
	// ClientCertFile and ClientKeyFile: a client certificate (URI SAN
	// spiffe://keycap.test/runtime/<ClientPrincipal>) the kernel maps to the
	// runtime principal ClientPrincipal, which exists and owns no tools yet.
	ClientCertFile string `json:"client_cert_file"`
	ClientKeyFile  string `json:"client_key_file"`
	// ClientPrincipal is "e2e-mtls".
	ClientPrincipal string `json:"client_principal"`
	// UnmappedClientCertFile and UnmappedClientKeyFile: a client certificate
	// from CAFile that maps to no principal.
	UnmappedClientCertFile string `json:"unmapped_client_cert_file"`
	UnmappedClientKeyFile  string `json:"unmapped_client_key_file"`
	// OtherCAFile is a CA that signed nothing keycap trusts or serves.
	OtherCAFile string `json:"other_ca_file"`
}

// RepoRoot is the repository root (three levels above this file's module dir).
func RepoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("e2estack: cannot locate source file")
	}
	// clients/go/internal/e2estack/e2estack.go -> repo root
	root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", "..", ".."))
	if _, err := os.Stat(filepath.Join(root, "package.json")); err != nil {
		return "", fmt.Errorf("e2estack: %s is not the repository root: %w", root, err)
	}
	return root, nil
}

// Start launches a plaintext stack and waits (up to timeout) for its ready
// line. The stack lives until Stop closes its stdin.
func Start(timeout time.Duration) (*Stack, error) { return start(timeout, false) }

// StartWithEnv is Start with extra KEY=value settings for the services (e.g. OTEL_*).
func StartWithEnv(timeout time.Duration, extra ...string) (*Stack, error) {
	return start(timeout, false, extra...)
}

// StartTLS is Start for a stack whose listeners all serve TLS (KEYCAP_E2E_TLS=1);
// its TLS field describes the PKI.
func StartTLS(timeout time.Duration) (*Stack, error) { return start(timeout, true) }

func start(timeout time.Duration, withTLS bool, extra ...string) (*Stack, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	script := filepath.Join(root, "dist", "test", "support", "e2e-stack.js")
	if _, err := os.Stat(script); err != nil {
		return nil, fmt.Errorf("e2estack: %s missing: build the TypeScript first (make build, or npx tsc -p . from the repo root)", script)
	}
	cmd := exec.Command("node", script)
	cmd.Dir = root
	// The stack's TLS is chosen here, not inherited.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KEYCAP_E2E_TLS=") {
			env = append(env, kv)
		}
	}
	if withTLS {
		env = append(env, "KEYCAP_E2E_TLS=1")
	}
	// e2e-stack prints its JSON line when keycap logs "ready", which is an
	// info-level record: keep the level at info or below.
	switch os.Getenv("KEYCAP_LOG_LEVEL") {
	case "info", "debug", "trace":
	default:
		env = append(env, "KEYCAP_LOG_LEVEL=info")
	}
	cmd.Env = append(env, extra...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s := &Stack{cmd: cmd, stdin: stdin, stderr: &lockedBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("e2estack: starting node: %w", err)
	}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		sent := false
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if sent || !strings.HasPrefix(line, "{") {
				continue
			}
			if err := json.Unmarshal([]byte(line), s); err == nil && s.Kernel != "" && s.Ledger != "" && s.Admin != "" && s.RuntimeToken != "" && (!withTLS || s.TLS != nil) {
				sent = true
				ready <- nil
			}
		}
		if !sent {
			ready <- errors.New("e2estack: stack exited before printing its ready line")
		}
	}()
	go func() { s.done <- cmd.Wait() }()
	select {
	case err := <-ready:
		if err != nil {
			s.Stop()
			return nil, fmt.Errorf("%w\n--- e2e-stack stderr ---\n%s", err, s.stderr.String())
		}
		return s, nil
	case <-time.After(timeout):
		s.Stop()
		return nil, fmt.Errorf("e2estack: not ready within %s\n--- e2e-stack stderr ---\n%s", timeout, s.stderr.String())
	}
}

// Stop closes the stack's stdin (it then stops everything) and waits for it to
// exit, killing it after 30 s.
func (s *Stack) Stop() {
	_ = s.stdin.Close()
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// Logs is what the stack wrote on stderr so far.
func (s *Stack) Logs() string { return s.stderr.String() }

// StartTimeout is KEYCAP_E2E_START_TIMEOUT (a Go duration) or 5 minutes (the
// first run may build FerretDB).
func StartTimeout() time.Duration {
	if v := os.Getenv("KEYCAP_E2E_START_TIMEOUT"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return 5 * time.Minute
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
