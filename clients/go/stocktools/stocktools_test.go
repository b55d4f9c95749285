package stocktools_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	os.Exit(code)
}

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

func listeners() []struct{ name, addr, service string } {
	return []struct{ name, addr, service string }{
		{"kernel", stack.Kernel, "keycap.kernel.v1.KernelService"},
		{"ledger", stack.Ledger, "keycap.ledger.v1.LedgerService"},
		{"admin", stack.Admin, "keycap.ledger.v1.LedgerAdminService"},
	}
}

func TestGrpcurlListsServicesThroughReflection(t *testing.T) {
	exe := grpcurl.install(t)
	for _, l := range listeners() {
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
	out, err := run(t, exe, "-plaintext", "-d", "{}", stack.Kernel, "keycap.kernel.v1.KernelService/ListTools")
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
	for _, l := range listeners() {
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

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
