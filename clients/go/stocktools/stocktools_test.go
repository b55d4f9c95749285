package stocktools_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keycap/keycap/clients/go/internal/e2estack"
)

// The stock tools, pinned. Both install from the Go module proxy with
// `go install <package>@<version>`.
var (
	grpcurl = goTool{name: "grpcurl", pkg: "github.com/fullstorydev/grpcurl/cmd/grpcurl", version: "v1.9.4"}
	probe   = goTool{name: "grpc-health-probe", pkg: "github.com/grpc-ecosystem/grpc-health-probe", version: "v0.4.63"}
)

var stack *e2estack.Stack

func TestMain(m *testing.M) {
	s, err := e2estack.Start(e2estack.StartTimeout())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stack = s
	code := m.Run()
	s.Stop()
	if tlsStackStarted != nil {
		tlsStackStarted.Stop()
	}
	os.Exit(code)
}

// The TLS stack (KEYCAP_E2E_TLS=1), started by the first test that needs it.
var (
	tlsStackOnce    sync.Once
	tlsStackStarted *e2estack.Stack
	tlsStackErr     error
)

func tlsStack(t *testing.T) *e2estack.Stack {
	t.Helper()
	tlsStackOnce.Do(func() { tlsStackStarted, tlsStackErr = e2estack.StartTLS(e2estack.StartTimeout()) })
	if tlsStackErr != nil {
		t.Fatalf("TLS stack: %v", tlsStackErr)
	}
	return tlsStackStarted
}

// bearer is grpcurl's header argument for a bearer secret.
func bearer(token string) string { return "authorization: Bearer " + token }

type goTool struct{ name, pkg, version string }

// cacheDir is ${KEYCAP_CACHE_DIR:-$HOME/.cache/keycap}/gotools.
func cacheDir(t *testing.T) string {
	t.Helper()
	base := os.Getenv("KEYCAP_CACHE_DIR")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatalf("no KEYCAP_CACHE_DIR and no home directory: %v", err)
		}
		base = filepath.Join(home, ".cache", "keycap")
	}
	return filepath.Join(base, "gotools")
}

// install returns the tool's binary, installing it with `GOBIN=<cache>/<name>@<version>
// go install <pkg>@<version>` unless that binary is already there.
func (g goTool) install(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(cacheDir(t), g.name+"@"+g.version)
	exe := filepath.Join(bin, filepath.Base(g.pkg))
	if _, err := os.Stat(exe); err == nil {
		return exe
	}
	cmd := exec.Command("go", "install", g.pkg+"@"+g.version)
	// Outside any module, so this module's go.mod plays no part.
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOBIN="+bin, "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install %s@%s: %v\n%s", g.pkg, g.version, err, out)
	}
	if _, err := os.Stat(exe); err != nil {
		t.Fatalf("go install %s@%s left no %s: %v", g.pkg, g.version, exe, err)
	}
	return exe
}

func run(t *testing.T, exe string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(exe, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		return "", err
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return out.String(), fmt.Errorf("%s %v: timed out", filepath.Base(exe), args)
	}
}

func listeners(s *e2estack.Stack) []struct{ name, addr, service string } {
	return []struct{ name, addr, service string }{
		{"kernel", s.Kernel, "keycap.kernel.v1.KernelService"},
		{"ledger", s.Ledger, "keycap.ledger.v1.LedgerService"},
		{"admin", s.Admin, "keycap.ledger.v1.LedgerAdminService"},
	}
}

func TestGrpcurlListsServicesThroughReflection(t *testing.T) {
	exe := grpcurl.install(t)
	for _, l := range listeners(stack) {
		out, err := run(t, exe, "-plaintext", l.addr, "list")
		if err != nil {
			t.Fatalf("grpcurl -plaintext %s list (%s): %v\n%s", l.addr, l.name, err, out)
		}
		if services := strings.Fields(out); !contains(services, l.service) {
			t.Errorf("grpcurl list on the %s listener: %q missing from %q", l.name, l.service, services)
		}
	}
}

// grpcurl resolves the request and response types through reflection: every
// file descriptor served must list its imports in `dependency`. (@grpc/reflection
// 1.0.4 fed from proto-loader drops them, grpc/grpc-node#3034, and this fails
// with `cannot resolve type: "*.effect.v1.EffectClass"`.)
func TestGrpcurlCallsListTools(t *testing.T) {
	exe := grpcurl.install(t)
	out, err := run(t, exe, "-plaintext", "-H", bearer(stack.RuntimeToken), "-d", "{}", stack.Kernel, "keycap.kernel.v1.KernelService/ListTools")
	if err != nil {
		t.Fatalf("grpcurl ListTools: %v\n%s", err, out)
	}
	// The response is JSON (`{}` when no tool is registered yet).
	if !strings.HasPrefix(strings.TrimSpace(out), "{") {
		t.Fatalf("grpcurl ListTools printed no JSON response:\n%s", out)
	}
}

func TestGrpcHealthProbeReportsEveryListenerServing(t *testing.T) {
	exe := probe.install(t)
	for _, l := range listeners(stack) {
		out, err := run(t, exe, "-addr", l.addr)
		if err != nil {
			t.Errorf("grpc-health-probe -addr %s (%s): %v\n%s", l.addr, l.name, err, out)
			continue
		}
		if !strings.Contains(out, "SERVING") {
			t.Errorf("grpc-health-probe -addr %s (%s): %q does not say SERVING", l.addr, l.name, out)
		}
	}
}

// Without the runtime's bearer the kernel refuses, in grpcurl's words too.
func TestGrpcurlWithoutTheBearerIsUnauthenticated(t *testing.T) {
	exe := grpcurl.install(t)
	out, err := run(t, exe, "-plaintext", "-d", "{}", stack.Kernel, "keycap.kernel.v1.AccessService/WhoAmI")
	if err == nil || !strings.Contains(out, "Unauthenticated") || !strings.Contains(out, "PRINCIPAL_CREDENTIAL_MISSING") {
		t.Fatalf("grpcurl WhoAmI without a bearer: err %v, want Unauthenticated PRINCIPAL_CREDENTIAL_MISSING:\n%s", err, out)
	}
	out, err = run(t, exe, "-plaintext", "-H", bearer(stack.RuntimeToken), "-d", "{}", stack.Kernel, "keycap.kernel.v1.AccessService/WhoAmI")
	if err != nil || !strings.Contains(out, `"local-runtime"`) || !strings.Contains(out, "AUTH_METHOD_BEARER") {
		t.Fatalf("grpcurl WhoAmI with the runtime bearer: %v\n%s", err, out)
	}
}

func TestGrpcurlOverTLSWithThePinnedCA(t *testing.T) {
	s := tlsStack(t)
	exe := grpcurl.install(t)
	for _, l := range listeners(s) {
		out, err := run(t, exe, "-cacert", s.TLS.CAFile, l.addr, "list")
		if err != nil || !contains(strings.Fields(out), l.service) {
			t.Errorf("grpcurl -cacert ca %s list (%s): %v, want %s among\n%s", l.addr, l.name, err, l.service, out)
		}
	}
	out, err := run(t, exe, "-cacert", s.TLS.CAFile, "-H", bearer(s.RuntimeToken), "-d", "{}", s.Kernel, "keycap.kernel.v1.AccessService/WhoAmI")
	if err != nil || !strings.Contains(out, `"local-runtime"`) || !strings.Contains(out, "AUTH_METHOD_BEARER") {
		t.Fatalf("grpcurl -cacert ca -H bearer WhoAmI: %v, want local-runtime by bearer:\n%s", err, out)
	}
	out, err = run(t, exe, "-cacert", s.TLS.CAFile, "-H", bearer(s.RuntimeToken), "-d", "{}", s.Kernel, "keycap.kernel.v1.KernelService/ListTools")
	if err != nil || !strings.HasPrefix(strings.TrimSpace(out), "{") {
		t.Fatalf("grpcurl -cacert ca -H bearer ListTools: %v\n%s", err, out)
	}
}

func TestGrpcurlOverTLSWithoutTheCAFailsTheHandshake(t *testing.T) {
	s := tlsStack(t)
	exe := grpcurl.install(t)
	// The system roots do not know the test CA.
	out, err := run(t, exe, "-connect-timeout", "10", "-H", bearer(s.RuntimeToken), "-d", "{}", s.Kernel, "keycap.kernel.v1.AccessService/WhoAmI")
	if err == nil || !strings.Contains(out, "certificate") || strings.Contains(out, "local-runtime") {
		t.Fatalf("grpcurl (system roots) WhoAmI: err %v, want a certificate verification failure:\n%s", err, out)
	}
	out, err = run(t, exe, "-connect-timeout", "10", "-cacert", s.TLS.OtherCAFile, "-H", bearer(s.RuntimeToken), "-d", "{}", s.Kernel, "keycap.kernel.v1.AccessService/WhoAmI")
	if err == nil || !strings.Contains(out, "certificate") || strings.Contains(out, "local-runtime") {
		t.Fatalf("grpcurl -cacert other_ca WhoAmI: err %v, want a certificate verification failure:\n%s", err, out)
	}
}

func TestGrpcurlPlaintextAgainstTLSFails(t *testing.T) {
	s := tlsStack(t)
	exe := grpcurl.install(t)
	for _, l := range listeners(s) {
		out, err := run(t, exe, "-plaintext", "-connect-timeout", "5", l.addr, "list")
		if err == nil || !strings.Contains(out, "Failed to dial") || contains(strings.Fields(out), l.service) {
			t.Errorf("grpcurl -plaintext %s list (%s, TLS listener): err %v, want a failure to dial:\n%s", l.addr, l.name, err, out)
		}
	}
}

func TestGrpcurlClientCertificateIsThePrincipal(t *testing.T) {
	s := tlsStack(t)
	exe := grpcurl.install(t)
	out, err := run(t, exe, "-cacert", s.TLS.CAFile, "-cert", s.TLS.ClientCertFile, "-key", s.TLS.ClientKeyFile, "-d", "{}", s.Kernel, "keycap.kernel.v1.AccessService/WhoAmI")
	if err != nil || !strings.Contains(out, `"`+s.TLS.ClientPrincipal+`"`) || !strings.Contains(out, "AUTH_METHOD_MTLS") {
		t.Fatalf("grpcurl -cert/-key WhoAmI: %v, want %s by mTLS:\n%s", err, s.TLS.ClientPrincipal, out)
	}
	out, err = run(t, exe, "-cacert", s.TLS.CAFile, "-cert", s.TLS.UnmappedClientCertFile, "-key", s.TLS.UnmappedClientKeyFile, "-d", "{}", s.Kernel, "keycap.kernel.v1.AccessService/WhoAmI")
	if err == nil || !strings.Contains(out, "CERTIFICATE_NOT_MAPPED") {
		t.Fatalf("grpcurl with the unmapped certificate: err %v, want CERTIFICATE_NOT_MAPPED:\n%s", err, out)
	}
}

func TestGrpcHealthProbeOverTLS(t *testing.T) {
	s := tlsStack(t)
	exe := probe.install(t)
	for _, l := range listeners(s) {
		out, err := run(t, exe, "-addr", l.addr, "-tls", "-tls-ca-cert", s.TLS.CAFile)
		if err != nil || !strings.Contains(out, "SERVING") {
			t.Errorf("grpc-health-probe -tls -tls-ca-cert ca -addr %s (%s): %v, want SERVING:\n%s", l.addr, l.name, err, out)
		}
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
