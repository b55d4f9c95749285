package keycap

// How a client proves who it is and whom it talks to: a runtime's bearer
// secret for the kernel, and TLS (a CA to verify the server, a client
// certificate where the listener asks for one).
//
// The bearer secret's default lookup is the same in every keycap client
// (TypeScript, Python, Go): KEYCAP_RUNTIME_TOKEN, else the file named by
// KEYCAP_RUNTIME_TOKEN_FILE, else $KEYCAP_DATA_DIR/runtime-token (data dir
// default: the nearest .keycap folder in the working directory or above it, up
// to the filesystem's root, a file named .keycap skipped; else ./.keycap),
// which `make run` creates on first start. An empty secret is none. A refusal
// for a missing credential says where the lookup looked
// (MissingCredentialHint).

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

// DefaultDataDir is the data directory, as the services resolve it:
// KEYCAP_DATA_DIR (relative to the working directory), else the nearest .keycap
// folder in the working directory or above it (so a program run from a
// subfolder finds the credentials `make run` made at the top), else
// ./.keycap; always absolute.
func DefaultDataDir() string { return dataDir(envValue("KEYCAP_DATA_DIR"), workingDir()) }

func dataDir(configured, cwd string) string {
	if configured != "" {
		if filepath.IsAbs(configured) {
			return filepath.Clean(configured)
		}
		return filepath.Join(cwd, configured)
	}
	if found, _ := searchDataDir(cwd); found != "" {
		return found
	}
	return filepath.Join(cwd, ".keycap")
}

// searchDataDir is the nearest .keycap folder in cwd or above ("" when none)
// and every folder searched.
func searchDataDir(cwd string) (found string, searched []string) {
	for dir := cwd; ; dir = filepath.Dir(dir) {
		searched = append(searched, dir)
		if fi, err := os.Stat(filepath.Join(dir, ".keycap")); err == nil && fi.IsDir() {
			return filepath.Join(dir, ".keycap"), searched
		}
		if filepath.Dir(dir) == dir {
			return "", searched
		}
	}
}

func workingDir() string {
	if wd, err := os.Getwd(); err == nil {
		return wd
	}
	return "."
}

// RuntimeTokenLookup is what the default lookup found: the secret and where it
// was read, or nothing and every place it looked, in order.
type RuntimeTokenLookup struct {
	// Token is the secret, trimmed; "" when none was found (an empty file is none).
	Token string
	// Source is "KEYCAP_RUNTIME_TOKEN" or the file read; "" when none was found.
	Source string
	// Tried lists each place looked at, for people, e.g.
	// "KEYCAP_RUNTIME_TOKEN (not set)", "/app/.keycap/runtime-token (no such file)".
	Tried []string
}

// LookupRuntimeToken is the default lookup with its trail (RuntimeTokenFromEnv
// is its Token). A KEYCAP_RUNTIME_TOKEN_FILE that cannot be read, or a default
// file that exists but cannot be read, is a *ConfigError.
func LookupRuntimeToken() (RuntimeTokenLookup, error) {
	return lookupRuntimeToken(envValue, workingDir())
}

func lookupRuntimeToken(env func(string) string, cwd string) (RuntimeTokenLookup, error) {
	if v := env("KEYCAP_RUNTIME_TOKEN"); v != "" {
		return RuntimeTokenLookup{Token: v, Source: "KEYCAP_RUNTIME_TOKEN"}, nil
	}
	tried := []string{"KEYCAP_RUNTIME_TOKEN (not set)"}
	explicit := env("KEYCAP_RUNTIME_TOKEN_FILE")
	file := explicit
	if file == "" {
		tried = append(tried, "KEYCAP_RUNTIME_TOKEN_FILE (not set)")
		configured := env("KEYCAP_DATA_DIR")
		if configured != "" {
			tried = append(tried, "KEYCAP_DATA_DIR="+configured)
		} else {
			found, searched := searchDataDir(cwd)
			result := "none"
			if found != "" {
				result = "found " + found
			}
			tried = append(tried, "KEYCAP_DATA_DIR (not set)", fmt.Sprintf("a .keycap folder in %s (%s)", strings.Join(searched, ", "), result))
		}
		file = filepath.Join(dataDir(configured, cwd), "runtime-token")
	} else if !filepath.IsAbs(file) {
		file = filepath.Join(cwd, file)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		if explicit == "" && errors.Is(err, fs.ErrNotExist) {
			return RuntimeTokenLookup{Tried: append(tried, file+" (no such file)")}, nil
		}
		setting := "KEYCAP_RUNTIME_TOKEN_FILE"
		if explicit == "" {
			setting = "KEYCAP_DATA_DIR"
		}
		return RuntimeTokenLookup{Tried: tried}, &ConfigError{Setting: setting, Problem: fmt.Sprintf("cannot read the runtime token %s: %v", file, pathCause(err)), Err: err}
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return RuntimeTokenLookup{Tried: append(tried, file+" (empty)")}, nil
	}
	return RuntimeTokenLookup{Token: token, Source: file, Tried: tried}, nil
}

// RuntimeTokenFromEnv is the runtime's bearer secret by the default lookup:
// KEYCAP_RUNTIME_TOKEN; else the file KEYCAP_RUNTIME_TOKEN_FILE names (a
// *ConfigError naming that setting when it cannot be read); else
// $KEYCAP_DATA_DIR/runtime-token (DefaultDataDir), and "" (no token, no
// error) when that file does not exist. Surrounding whitespace is trimmed.
func RuntimeTokenFromEnv() (string, error) {
	found, err := LookupRuntimeToken()
	return found.Token, err
}

// MissingCredentialHint is what a KernelClient adds to a
// PRINCIPAL_CREDENTIAL_MISSING refusal of a call sent without a bearer: where
// the default lookup looked (now) and which settings would supply a credential.
func MissingCredentialHint() string { return missingCredentialHint(envValue, workingDir()) }

func missingCredentialHint(env func(string) string, cwd string) string {
	found, err := lookupRuntimeToken(env, cwd)
	switch {
	case err != nil:
		return "this client sent no runtime credential, and the default lookup fails: " + err.Error()
	case found.Token != "":
		return fmt.Sprintf("this client sent no runtime credential, though the default lookup finds one now (%s): the client was made with WithToken(\"\") or before it existed", found.Source)
	}
	return "this client sent no runtime credential; the default lookup tried " + strings.Join(found.Tried, "; ") +
		". Run `make run` (or `keycap serve`) in this folder or one above it, which writes .keycap/runtime-token, " +
		"or set KEYCAP_RUNTIME_TOKEN, KEYCAP_RUNTIME_TOKEN_FILE or KEYCAP_DATA_DIR, or pass WithToken"
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
