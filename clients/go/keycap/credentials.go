package keycap

// How a client proves who it is and whom it talks to: a runtime's bearer
// secret for the kernel, and TLS (a CA to verify the server, a client
// certificate where the listener asks for one).
//
// The bearer secret's default lookup is the same in every keycap client
// (TypeScript, Python, Go): KEYCAP_RUNTIME_TOKEN, else the file named by
// KEYCAP_RUNTIME_TOKEN_FILE, else $KEYCAP_DATA_DIR/runtime-token (data dir
// default ./.keycap, against the working directory), which `make run` creates
// on first start.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc/credentials"
)

// ConfigError is a client setting that cannot be used (an unreadable token
// file, a client certificate without its key, ...). Setting names it: an
// environment variable, or a TLSFiles field.
type ConfigError struct {
	// Setting is what to fix, e.g. "KEYCAP_RUNTIME_TOKEN_FILE" or "TLSFiles.KeyFile".
	Setting string
	// Problem says what is wrong with it.
	Problem string
	// Err is the underlying error, if any.
	Err error
}

// Error implements error: "keycap: <setting>: <problem>".
func (e *ConfigError) Error() string { return "keycap: " + e.Setting + ": " + e.Problem }

// Unwrap returns the underlying error.
func (e *ConfigError) Unwrap() error { return e.Err }

// TLSFiles names the PEM files of a TLS channel (WithTLS).
type TLSFiles struct {
	// CAFile is a PEM CA bundle that signs the server's certificate. When set
	// it is pinned: the system roots are not used. Empty: the system roots.
	CAFile string
	// CertFile is a PEM client certificate chain, for listeners that verify
	// one (mTLS). Needs KeyFile.
	CertFile string
	// KeyFile is the PEM private key of CertFile. Needs CertFile.
	KeyFile string
}

// TLSCredentials builds gRPC transport credentials from t (what WithTLS
// uses; for WithDialOptions when you need more control). Problems are a
// *ConfigError naming the field.
func TLSCredentials(t TLSFiles) (credentials.TransportCredentials, error) {
	cfg, err := TLSConfig(t)
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(cfg), nil
}

// TLSConfig is the *tls.Config of TLSCredentials (TLS 1.2 or later).
func TLSConfig(t TLSFiles) (*tls.Config, error) {
	if (t.CertFile == "") != (t.KeyFile == "") {
		setting := "TLSFiles.KeyFile"
		if t.CertFile == "" {
			setting = "TLSFiles.CertFile"
		}
		return nil, &ConfigError{Setting: setting, Problem: "a client certificate needs both CertFile and KeyFile (KEYCAP_TLS_CLIENT_CERT_FILE and KEYCAP_TLS_CLIENT_KEY_FILE)"}
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := readPEM("TLSFiles.CAFile", t.CAFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &ConfigError{Setting: "TLSFiles.CAFile", Problem: fmt.Sprintf("%s holds no PEM certificate", t.CAFile)}
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" {
		certPEM, err := readPEM("TLSFiles.CertFile", t.CertFile)
		if err != nil {
			return nil, err
		}
		keyPEM, err := readPEM("TLSFiles.KeyFile", t.KeyFile)
		if err != nil {
			return nil, err
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, &ConfigError{Setting: "TLSFiles.CertFile", Problem: fmt.Sprintf("%s and %s are not a certificate and its key: %v", t.CertFile, t.KeyFile, err), Err: err}
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

func readPEM(setting, file string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, &ConfigError{Setting: setting, Problem: fmt.Sprintf("cannot read %s: %v", file, pathCause(err)), Err: err}
	}
	return b, nil
}

// TLSFromEnv reads TLSFiles from KEYCAP_TLS_CA_FILE, KEYCAP_TLS_CLIENT_CERT_FILE
// and KEYCAP_TLS_CLIENT_KEY_FILE; ok is false when none is set (plaintext):
//
//	if t, ok := keycap.TLSFromEnv(); ok {
//		opts = append(opts, keycap.WithTLS(t))
//	}
func TLSFromEnv() (t TLSFiles, ok bool) {
	t = TLSFiles{
		CAFile:   envValue("KEYCAP_TLS_CA_FILE"),
		CertFile: envValue("KEYCAP_TLS_CLIENT_CERT_FILE"),
		KeyFile:  envValue("KEYCAP_TLS_CLIENT_KEY_FILE"),
	}
	return t, t != TLSFiles{}
}

// DefaultDataDir is KEYCAP_DATA_DIR, else ./.keycap, made absolute against the
// working directory (as the services resolve it).
func DefaultDataDir() string {
	dir := envValue("KEYCAP_DATA_DIR")
	if dir == "" {
		dir = ".keycap"
	}
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}

// RuntimeTokenFromEnv is the runtime's bearer secret by the default lookup:
// KEYCAP_RUNTIME_TOKEN; else the file KEYCAP_RUNTIME_TOKEN_FILE names (a
// *ConfigError naming that setting when it cannot be read); else
// $KEYCAP_DATA_DIR/runtime-token, and "" (no token, no error) when that file
// does not exist. Surrounding whitespace is trimmed.
func RuntimeTokenFromEnv() (string, error) {
	if v := envValue("KEYCAP_RUNTIME_TOKEN"); v != "" {
		return v, nil
	}
	explicit := envValue("KEYCAP_RUNTIME_TOKEN_FILE")
	file := explicit
	if file == "" {
		file = filepath.Join(DefaultDataDir(), "runtime-token")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		if explicit == "" && errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		setting := "KEYCAP_RUNTIME_TOKEN_FILE"
		if explicit == "" {
			setting = "KEYCAP_DATA_DIR"
		}
		return "", &ConfigError{Setting: setting, Problem: fmt.Sprintf("cannot read the runtime token %s: %v", file, pathCause(err)), Err: err}
	}
	return strings.TrimSpace(string(b)), nil
}

// pathCause is the operating system's reason of a file error ("no such file
// or directory"), without the path the message already names.
func pathCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func envValue(name string) string { return strings.TrimSpace(os.Getenv(name)) }
