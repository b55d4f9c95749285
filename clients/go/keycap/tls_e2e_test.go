package keycap_test

// The Go client against a stack whose three listeners serve TLS
// (KEYCAP_E2E_TLS=1) and whose kernel accepts client certificates.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	kernelv1 "github.com/keycap/keycap/clients/go/gen/keycap/kernel/v1"
	"github.com/keycap/keycap/clients/go/keycap"
	"google.golang.org/grpc/codes"
)

func TestTLSKernelRefusesAClientThatDoesNotTrustItsCA(t *testing.T) {
	s := tlsStack(t)
	for _, tc := range []struct {
		name    string
		opts    []keycap.Option
		mention string // in the transport error; "" for any
	}{
		{"plaintext", nil, ""},
		{"another CA", []keycap.Option{keycap.WithTLS(keycap.TLSFiles{CAFile: s.TLS.OtherCAFile})}, "certificate"},
		{"system roots (no CA)", []keycap.Option{keycap.WithTLS(keycap.TLSFiles{})}, "certificate"},
		{"another CA, with the mapped client certificate", []keycap.Option{keycap.WithTLS(keycap.TLSFiles{CAFile: s.TLS.OtherCAFile, CertFile: s.TLS.ClientCertFile, KeyFile: s.TLS.ClientKeyFile})}, "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each call waits for a ready channel until its deadline, which a
			// failing handshake never gives it: keep the deadline short.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := newAccess(t, s.Kernel, s.RuntimeToken, tc.opts...).WhoAmI(ctx)
			requireNoConnection(t, err, tc.mention)
			ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err = newKernel(t, s.Kernel, append(tc.opts, keycap.WithToken(s.RuntimeToken))...).ListTools(ctx)
			requireNoConnection(t, err, tc.mention)
		})
	}
}

// requireNoConnection checks err is a *keycap.Error for a transport failure
// (no ErrorInfo) whose message mentions mention: DEADLINE_EXCEEDED naming the
// latest connection error, as the call waits for a ready channel until its
// deadline, or UNAVAILABLE.
func requireNoConnection(t *testing.T, err error, mention string) {
	t.Helper()
	var kerr *keycap.Error
	if !errors.As(err, &kerr) || (kerr.Code != codes.DeadlineExceeded && kerr.Code != codes.Unavailable) ||
		kerr.Domain != "" || !strings.Contains(kerr.Message, mention) {
		t.Fatalf("expected DEADLINE_EXCEEDED or UNAVAILABLE (mentioning %q), got %v", mention, err)
	}
	t.Logf("refused as expected: %v", err)
}

func TestTLSFullFlowWithThePinnedCA(t *testing.T) {
	s := tlsStack(t)
	ctx := testContext(t)
	pinned := keycap.WithTLS(keycap.TLSFiles{CAFile: s.TLS.CAFile})
	k := newKernel(t, s.Kernel, pinned, keycap.WithLedger(s.Ledger), keycap.WithToken(s.RuntimeToken))
	a, err := keycap.NewAdminClient(s.Admin, s.AdminToken, pinned)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })

	toolID := registerCharge(t, ctx, k, "go.e2e.tls")
	h, err := k.Begin(ctx, toolID, map[string]any{"order_id": "o-" + uniqueID("t"), "cents": 100})
	if err != nil {
		t.Fatalf("Begin over TLS: %v", err)
	}
	w, err := h.Write(ctx, []byte(`{"charged":100}`))
	if err != nil || w.GetDuplicate() {
		t.Fatalf("Write over TLS: %v (err %v)", w, err)
	}
	if _, err := h.Complete(ctx, keycap.Succeeded, ""); err != nil {
		t.Fatalf("Complete over TLS: %v", err)
	}
	entry, err := a.GetEntryByKey(ctx, h.Key())
	if err != nil || entry.GetEntryId() != w.GetEntry().GetEntryId() || entry.GetPrincipal() != "local-runtime" {
		t.Fatalf("admin over TLS: GetEntryByKey = %v (err %v), want entry %s of local-runtime", entry, err, w.GetEntry().GetEntryId())
	}
	if pending, err := k.ListPending(ctx, toolID); err != nil || len(pending) != 0 {
		t.Fatalf("ListPending after Complete = %v (err %v)", pending, err)
	}
}

func TestTLSClientCertificateProvesThePrincipal(t *testing.T) {
	s := tlsStack(t)
	ctx := testContext(t)
	mtls := keycap.WithTLS(keycap.TLSFiles{CAFile: s.TLS.CAFile, CertFile: s.TLS.ClientCertFile, KeyFile: s.TLS.ClientKeyFile})

	me, err := newAccess(t, s.Kernel, "", mtls).WhoAmI(ctx)
	if err != nil {
		t.Fatalf("WhoAmI by certificate: %v", err)
	}
	if me.GetPrincipal() != s.TLS.ClientPrincipal || me.GetPrincipal() != "e2e-mtls" || me.GetAuthMethod() != kernelv1.AuthMethod_AUTH_METHOD_MTLS ||
		me.GetCertificateIdentity() != "spiffe://keycap.test/runtime/e2e-mtls" || me.GetRole() != keycap.RoleRuntime {
		t.Fatalf("WhoAmI by certificate = %v, want e2e-mtls, runtime, mTLS, spiffe://keycap.test/runtime/e2e-mtls", me)
	}
	// A bearer, when sent, decides.
	if me, err := newAccess(t, s.Kernel, s.RuntimeToken, mtls).WhoAmI(ctx); err != nil || me.GetPrincipal() != "local-runtime" || me.GetAuthMethod() != kernelv1.AuthMethod_AUTH_METHOD_BEARER {
		t.Fatalf("WhoAmI by certificate and bearer = %v (err %v), want local-runtime by bearer", me, err)
	}

	// The certificate's principal runs a tool end to end, with no token.
	k := newKernel(t, s.Kernel, mtls, keycap.WithLedger(s.Ledger), keycap.WithToken(""))
	toolID := registerCharge(t, ctx, k, "go.e2e.mtls")
	if tool, err := k.GetTool(ctx, toolID); err != nil || tool.GetOwner() != "e2e-mtls" {
		t.Fatalf("GetTool(%s) = %v (err %v), want owner e2e-mtls", toolID, tool, err)
	}
	h, err := k.Begin(ctx, toolID, map[string]any{"order_id": "o-" + uniqueID("m")})
	if err != nil {
		t.Fatalf("Begin by certificate: %v", err)
	}
	w, err := h.Write(ctx, []byte("mtls"))
	if err != nil || w.GetEntry().GetPrincipal() != "e2e-mtls" {
		t.Fatalf("Write = %v (err %v), want an entry of e2e-mtls", w, err)
	}
	if _, err := h.Complete(ctx, keycap.Succeeded, ""); err != nil {
		t.Fatalf("Complete: %v", err)
	}
}

func TestTLSUnmappedClientCertificateIsRefused(t *testing.T) {
	s := tlsStack(t)
	ctx := testContext(t)
	unmapped := keycap.WithTLS(keycap.TLSFiles{CAFile: s.TLS.CAFile, CertFile: s.TLS.UnmappedClientCertFile, KeyFile: s.TLS.UnmappedClientKeyFile})
	_, err := newAccess(t, s.Kernel, "", unmapped).WhoAmI(ctx)
	requireRefusal(t, err, codes.Unauthenticated, keycap.ReasonCertificateNotMapped)
	_, err = newKernel(t, s.Kernel, unmapped, keycap.WithToken("")).ListTools(ctx)
	requireRefusal(t, err, codes.Unauthenticated, keycap.ReasonCertificateNotMapped)
	// Without any certificate or token: missing, not "not mapped".
	_, err = newAccess(t, s.Kernel, "", keycap.WithTLS(keycap.TLSFiles{CAFile: s.TLS.CAFile})).WhoAmI(ctx)
	requireRefusal(t, err, codes.Unauthenticated, keycap.ReasonPrincipalCredentialMissing)
}

func TestTLSSettingsFromTheEnvironment(t *testing.T) {
	s := tlsStack(t)
	ctx := testContext(t)
	t.Setenv("KEYCAP_TLS_CA_FILE", s.TLS.CAFile)
	t.Setenv("KEYCAP_TLS_CLIENT_CERT_FILE", s.TLS.ClientCertFile)
	t.Setenv("KEYCAP_TLS_CLIENT_KEY_FILE", s.TLS.ClientKeyFile)
	files, ok := keycap.TLSFromEnv()
	if !ok {
		t.Fatal("TLSFromEnv: not set")
	}
	me, err := newAccess(t, s.Kernel, "", keycap.WithTLS(files)).WhoAmI(ctx)
	if err != nil || me.GetPrincipal() != "e2e-mtls" || me.GetAuthMethod() != kernelv1.AuthMethod_AUTH_METHOD_MTLS {
		t.Fatalf("WhoAmI with TLS from the environment = %v (err %v), want e2e-mtls by mTLS", me, err)
	}
}
