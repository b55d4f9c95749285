package keycap_test

// Errors that name the fix (issue 33 items 1 and 3): the runtime credential is
// found from a subfolder as the TypeScript client finds it, a missing one says
// where the lookup looked, and a service that cannot be reached is named with
// its address and the setting that chose it.

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keycap/keycap/clients/go/keycap"
	"google.golang.org/grpc/codes"
)

// nestedFolder makes top/app/src/deep, with top/.keycap/runtime-token holding
// token unless it is "", clears the lookup's settings and moves there. It
// returns top and the subfolder, symlinks resolved.
func nestedFolder(t *testing.T, token string) (top, sub string) {
	t.Helper()
	top, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		if err := os.Mkdir(filepath.Join(top, ".keycap"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(top, ".keycap", "runtime-token"), []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sub = filepath.Join(top, "app", "src", "deep")
	if err := os.MkdirAll(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"KEYCAP_RUNTIME_TOKEN", "KEYCAP_RUNTIME_TOKEN_FILE", "KEYCAP_DATA_DIR"} {
		t.Setenv(name, "")
	}
	t.Chdir(sub)
	return top, sub
}

func TestTheRuntimeCredentialIsFoundFromANestedSubfolder(t *testing.T) {
	top, sub := nestedFolder(t, "keycap_rt_above")
	found, err := keycap.LookupRuntimeToken()
	want := filepath.Join(top, ".keycap", "runtime-token")
	if err != nil || found.Token != "keycap_rt_above" || found.Source != want {
		t.Fatalf("LookupRuntimeToken = %+v, %v; want the token of %s", found, err, want)
	}
	if got := keycap.DefaultDataDir(); got != filepath.Join(top, ".keycap") {
		t.Fatalf("DefaultDataDir = %q, want %q", got, filepath.Join(top, ".keycap"))
	}
	// As in TypeScript: a file named .keycap is skipped; KEYCAP_DATA_DIR wins, relative to the folder.
	if err := os.WriteFile(filepath.Join(sub, ".keycap"), []byte("not a folder"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, err := keycap.RuntimeTokenFromEnv(); err != nil || tok != "keycap_rt_above" {
		t.Fatalf("RuntimeTokenFromEnv past a file named .keycap = %q, %v", tok, err)
	}
	t.Setenv("KEYCAP_DATA_DIR", "data")
	if got := keycap.DefaultDataDir(); got != filepath.Join(sub, "data") {
		t.Fatalf("DefaultDataDir with KEYCAP_DATA_DIR=data = %q, want %q", got, filepath.Join(sub, "data"))
	}
}

func TestWithoutOneTheHintListsTheSettingsAndFoldersTried(t *testing.T) {
	top, sub := nestedFolder(t, "")
	if found, _ := keycap.LookupRuntimeToken(); found.Token != "" {
		t.Skipf("a .keycap with a runtime-token above %s: %s", top, found.Source)
	}
	hint := keycap.MissingCredentialHint()
	for _, want := range []string{"KEYCAP_RUNTIME_TOKEN (not set)", "KEYCAP_RUNTIME_TOKEN_FILE (not set)", "KEYCAP_DATA_DIR (not set)", sub, filepath.Join(top, "app"), top + ",", "WithToken"} {
		if !strings.Contains(hint, want) {
			t.Errorf("hint lacks %q:\n%s", want, hint)
		}
	}
	t.Setenv("KEYCAP_DATA_DIR", filepath.Join(top, "data"))
	if hint := keycap.MissingCredentialHint(); !strings.Contains(hint, filepath.Join(top, "data", "runtime-token")+" (no such file)") {
		t.Errorf("hint with KEYCAP_DATA_DIR lacks its file:\n%s", hint)
	}
}

func TestAKernelClientInASubfolderPresentsTheCredentialAbove(t *testing.T) {
	nestedFolder(t, stack.RuntimeToken)
	k, err := keycap.NewKernelClient(stack.Kernel)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if _, err := k.ListTools(testContext(t)); err != nil {
		t.Fatalf("ListTools with the credential found above: %v", err)
	}
}

func TestAKernelCallWithoutACredentialSaysWhereTheLookupLooked(t *testing.T) {
	_, sub := nestedFolder(t, "")
	k, err := keycap.NewKernelClient(stack.Kernel)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	_, err = k.ListTools(testContext(t))
	kerr := requireRefusal(t, err, codes.Unauthenticated, keycap.ReasonPrincipalCredentialMissing)
	if !strings.Contains(kerr.Message, "this client sent no runtime credential") || !(strings.Contains(kerr.Message, sub) || strings.Contains(kerr.Message, "finds one now")) {
		t.Fatalf("the refusal does not say where the lookup looked: %s", kerr.Message)
	}
}

func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func requireUnreachable(t *testing.T, err error, what, address, setting string) {
	t.Helper()
	var kerr *keycap.Error
	if !errors.As(err, &kerr) {
		t.Fatalf("want a *keycap.Error, got %T: %v", err, err)
	}
	if kerr.Code != codes.Unavailable && kerr.Code != codes.DeadlineExceeded {
		t.Fatalf("code %v, want UNAVAILABLE or DEADLINE_EXCEEDED: %v", kerr.Code, err)
	}
	if kerr.Reason != kerr.CodeName() {
		t.Fatalf("reason %q, want the code's name unchanged", kerr.Reason)
	}
	t.Log(kerr)
	for _, want := range []string{"the " + what + " at " + address + " could not be reached", setting, "1.5s"} {
		if !strings.Contains(kerr.Message, want) {
			t.Errorf("message lacks %q: %s", want, kerr.Message)
		}
	}
}

func TestAnUnreachableKernelOrLedgerIsNamedWithItsAddressAndSetting(t *testing.T) {
	address := freeAddress(t)
	started := time.Now()
	k, err := keycap.NewKernelClient(address, keycap.WithToken("keycap_rt_x"), keycap.WithCallTimeout(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	_, err = k.ListTools(context.Background())
	requireUnreachable(t, err, "keycap kernel", address, "KEYCAP_KERNEL_ADDRESS")
	l, err := keycap.NewLedgerClient(address, keycap.WithCallTimeout(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = l.LookupWithCapability(context.Background(), "cap", "r")
	requireUnreachable(t, err, "keycap ledger", address, "WithLedger(address)")
	if elapsed := time.Since(started); elapsed > time.Minute {
		t.Fatalf("took %v: bounded by the call timeout, not gRPC's reconnect schedule", elapsed)
	}
}
