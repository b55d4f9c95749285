package keycap_test

// Client-side settings checks (no RPC).

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keycap/keycap/clients/go/keycap"
)

func requireConfigError(t *testing.T, err error, setting string, mentions ...string) {
	t.Helper()
	var cerr *keycap.ConfigError
	if !errors.As(err, &cerr) {
		t.Fatalf("expected a *keycap.ConfigError naming %s, got %T: %v", setting, err, err)
	}
	if cerr.Setting != setting {
		t.Fatalf("ConfigError names %q, want %q (%v)", cerr.Setting, setting, err)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Fatalf("%q does not mention %q", err.Error(), m)
		}
	}
}

func TestTLSClientCertificateWithoutItsKeyIsAConfigError(t *testing.T) {
	_, err := keycap.NewKernelClient("127.0.0.1:1", keycap.WithToken(""), keycap.WithTLS(keycap.TLSFiles{CertFile: "client.pem"}))
	requireConfigError(t, err, "TLSFiles.KeyFile", "CertFile and KeyFile")
	_, err = keycap.NewAccessClient("127.0.0.1:1", "", keycap.WithTLS(keycap.TLSFiles{KeyFile: "client.key"}))
	requireConfigError(t, err, "TLSFiles.CertFile", "CertFile and KeyFile")
}

func TestTLSUnusableFilesAreConfigErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing-ca.pem")
	for name, newClient := range map[string]func(...keycap.Option) error{
		"kernel": func(o ...keycap.Option) error {
			_, err := keycap.NewKernelClient("127.0.0.1:1", append(o, keycap.WithToken(""))...)
			return err
		},
		"ledger": func(o ...keycap.Option) error { _, err := keycap.NewLedgerClient("127.0.0.1:1", o...); return err },
		"admin":  func(o ...keycap.Option) error { _, err := keycap.NewAdminClient("127.0.0.1:1", "t", o...); return err },
		"access": func(o ...keycap.Option) error { _, err := keycap.NewAccessClient("127.0.0.1:1", "", o...); return err },
	} {
		t.Run(name, func(t *testing.T) {
			requireConfigError(t, newClient(keycap.WithTLS(keycap.TLSFiles{CAFile: missing})), "TLSFiles.CAFile", missing)
		})
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := keycap.NewLedgerClient("127.0.0.1:1", keycap.WithTLS(keycap.TLSFiles{CAFile: notPEM}))
	requireConfigError(t, err, "TLSFiles.CAFile", notPEM)
	_, err = keycap.NewLedgerClient("127.0.0.1:1", keycap.WithTLS(keycap.TLSFiles{CertFile: notPEM, KeyFile: notPEM}))
	requireConfigError(t, err, "TLSFiles.CertFile", notPEM)
}

func TestTLSFromEnv(t *testing.T) {
	for _, k := range []string{"KEYCAP_TLS_CA_FILE", "KEYCAP_TLS_CLIENT_CERT_FILE", "KEYCAP_TLS_CLIENT_KEY_FILE"} {
		t.Setenv(k, "")
	}
	if got, ok := keycap.TLSFromEnv(); ok {
		t.Fatalf("TLSFromEnv with nothing set = %v, true; want plaintext", got)
	}
	t.Setenv("KEYCAP_TLS_CA_FILE", "/pki/ca.pem")
	t.Setenv("KEYCAP_TLS_CLIENT_CERT_FILE", "/pki/client.pem")
	t.Setenv("KEYCAP_TLS_CLIENT_KEY_FILE", "/pki/client.key")
	want := keycap.TLSFiles{CAFile: "/pki/ca.pem", CertFile: "/pki/client.pem", KeyFile: "/pki/client.key"}
	if got, ok := keycap.TLSFromEnv(); !ok || got != want {
		t.Fatalf("TLSFromEnv = %v, %v; want %v, true", got, ok, want)
	}
}

func TestRuntimeTokenFromEnvTrimsAndPrefersTheVariable(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tok")
	if err := os.WriteFile(file, []byte("  from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KEYCAP_DATA_DIR", dir)
	t.Setenv("KEYCAP_RUNTIME_TOKEN_FILE", file)
	t.Setenv("KEYCAP_RUNTIME_TOKEN", "")
	if tok, err := keycap.RuntimeTokenFromEnv(); err != nil || tok != "from-file" {
		t.Fatalf("RuntimeTokenFromEnv = %q, %v; want the file's token trimmed", tok, err)
	}
	t.Setenv("KEYCAP_RUNTIME_TOKEN", "from-env")
	if tok, err := keycap.RuntimeTokenFromEnv(); err != nil || tok != "from-env" {
		t.Fatalf("RuntimeTokenFromEnv = %q, %v; want KEYCAP_RUNTIME_TOKEN", tok, err)
	}
	t.Setenv("KEYCAP_RUNTIME_TOKEN", "")
	t.Setenv("KEYCAP_RUNTIME_TOKEN_FILE", "")
	if tok, err := keycap.RuntimeTokenFromEnv(); err != nil || tok != "" {
		t.Fatalf("RuntimeTokenFromEnv with an empty data dir = %q, %v; want none, no error", tok, err)
	}
	// The default file exists but is not readable as a file.
	if err := os.Mkdir(filepath.Join(dir, "runtime-token"), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := keycap.RuntimeTokenFromEnv()
	requireConfigError(t, err, "KEYCAP_DATA_DIR", filepath.Join(dir, "runtime-token"))
	if got := keycap.DefaultDataDir(); got != dir {
		t.Fatalf("DefaultDataDir = %q, want %q", got, dir)
	}
}
