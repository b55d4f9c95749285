package keycap_test

// The kernel authenticates every caller (bearer secret or mapped TLS client
// certificate) and checks what it may do; AccessService manages principals
// and grants. Against the plaintext stack of TestMain.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kernelv1 "github.com/keycap/keycap/clients/go/gen/keycap/kernel/v1"
	"github.com/keycap/keycap/clients/go/keycap"
	"google.golang.org/grpc/codes"
)

func newKernel(t *testing.T, address string, opts ...keycap.Option) *keycap.KernelClient {
	t.Helper()
	k, err := keycap.NewKernelClient(address, opts...)
	if err != nil {
		t.Fatalf("NewKernelClient: %v", err)
	}
	t.Cleanup(func() { _ = k.Close() })
	return k
}

func newAccess(t *testing.T, address, token string, opts ...keycap.Option) *keycap.AccessClient {
	t.Helper()
	a, err := keycap.NewAccessClient(address, token, opts...)
	if err != nil {
		t.Fatalf("NewAccessClient: %v", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// newRuntimePrincipal creates a fresh runtime principal with the admin
// credential and returns its name and secret.
func newRuntimePrincipal(t *testing.T, ctx context.Context) (string, string) {
	t.Helper()
	name := uniqueID("go-e2e-runtime")
	res, err := newAccess(t, stack.Kernel, stack.AdminToken).CreatePrincipal(ctx, name, keycap.RoleRuntime)
	if err != nil {
		t.Fatalf("CreatePrincipal(%s): %v", name, err)
	}
	if res.GetSecret() == "" || res.GetPrincipal().GetName() != name || res.GetPrincipal().GetRole() != keycap.RoleRuntime {
		t.Fatalf("CreatePrincipal(%s) = %v", name, res)
	}
	return name, res.GetSecret()
}

// clearTokenEnv unsets every setting of the default token lookup for this test.
func clearTokenEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{"KEYCAP_RUNTIME_TOKEN", "KEYCAP_RUNTIME_TOKEN_FILE", "KEYCAP_DATA_DIR"} {
		t.Setenv(k, "")
	}
}

func TestBeginCallWithoutATokenIsUnauthenticated(t *testing.T) {
	ctx := testContext(t)
	c := newClients(t)
	toolID := registerCharge(t, ctx, c.kernel, "go.e2e.notoken")
	_, err := newKernel(t, stack.Kernel, keycap.WithToken("")).BeginCall(ctx, toolID, `{"order_id":"o-1"}`)
	requireRefusal(t, err, codes.Unauthenticated, keycap.ReasonPrincipalCredentialMissing)
}

func TestBeginCallWithAWrongTokenIsUnauthenticated(t *testing.T) {
	ctx := testContext(t)
	c := newClients(t)
	toolID := registerCharge(t, ctx, c.kernel, "go.e2e.wrongtoken")
	_, err := newKernel(t, stack.Kernel, keycap.WithToken("keycap_rt_not-a-principals-secret")).BeginCall(ctx, toolID, `{"order_id":"o-1"}`)
	requireRefusal(t, err, codes.Unauthenticated, keycap.ReasonPrincipalCredentialInvalid)
	// A capability is not a principal credential either.
	res, err := c.kernel.BeginCall(ctx, toolID, `{"order_id":"o-2"}`)
	if err != nil {
		t.Fatalf("BeginCall: %v", err)
	}
	_, err = newKernel(t, stack.Kernel, keycap.WithToken(res.GetCapability())).BeginCall(ctx, toolID, `{"order_id":"o-2"}`)
	requireRefusal(t, err, codes.Unauthenticated, keycap.ReasonPrincipalCredentialInvalid)
}

func TestWhoAmIWithTheRuntimeTokenIsTheLocalRuntime(t *testing.T) {
	ctx := testContext(t)
	me, err := newAccess(t, stack.Kernel, stack.RuntimeToken).WhoAmI(ctx)
	if err != nil {
		t.Fatalf("WhoAmI: %v", err)
	}
	if me.GetPrincipal() != "local-runtime" || me.GetRole() != keycap.RoleRuntime || me.GetAuthMethod() != kernelv1.AuthMethod_AUTH_METHOD_BEARER {
		t.Fatalf("WhoAmI(runtime_token) = %v, want local-runtime, runtime, bearer", me)
	}
	admin, err := newAccess(t, stack.Kernel, stack.AdminToken).WhoAmI(ctx)
	if err != nil {
		t.Fatalf("WhoAmI(admin): %v", err)
	}
	if admin.GetPrincipal() != "admin" || admin.GetRole() != keycap.RoleOperator || admin.GetAuthMethod() != kernelv1.AuthMethod_AUTH_METHOD_ADMIN_CREDENTIAL {
		t.Fatalf("WhoAmI(admin_token) = %v, want admin, operator, admin credential", admin)
	}
	_, err = newAccess(t, stack.Kernel, "").WhoAmI(ctx)
	requireRefusal(t, err, codes.Unauthenticated, keycap.ReasonPrincipalCredentialMissing)
}

// Without WithToken the KernelClient finds the runtime token by the default
// lookup; success proves the token was sent, since no call passes without one.
func TestKernelClientFindsTheRuntimeTokenByTheDefaultLookup(t *testing.T) {
	registersAsLocalRuntime := func(t *testing.T) {
		t.Helper()
		ctx := testContext(t)
		k := newKernel(t, stack.Kernel)
		id := registerCharge(t, ctx, k, "go.e2e.lookup")
		tool, err := k.GetTool(ctx, id)
		if err != nil || tool.GetOwner() != "local-runtime" {
			t.Fatalf("GetTool(%s) = %v (err %v), want owner local-runtime", id, tool, err)
		}
	}
	writeToken := func(t *testing.T, file string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(stack.RuntimeToken+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("KEYCAP_RUNTIME_TOKEN", func(t *testing.T) {
		clearTokenEnv(t)
		t.Setenv("KEYCAP_DATA_DIR", t.TempDir())
		t.Setenv("KEYCAP_RUNTIME_TOKEN", stack.RuntimeToken)
		registersAsLocalRuntime(t)
	})
	t.Run("KEYCAP_RUNTIME_TOKEN_FILE", func(t *testing.T) {
		clearTokenEnv(t)
		file := filepath.Join(t.TempDir(), "secret")
		writeToken(t, file)
		t.Setenv("KEYCAP_DATA_DIR", t.TempDir())
		t.Setenv("KEYCAP_RUNTIME_TOKEN_FILE", file)
		registersAsLocalRuntime(t)
	})
	t.Run("KEYCAP_DATA_DIR/runtime-token", func(t *testing.T) {
		clearTokenEnv(t)
		dir := t.TempDir()
		writeToken(t, filepath.Join(dir, "runtime-token"))
		t.Setenv("KEYCAP_DATA_DIR", dir)
		registersAsLocalRuntime(t)
	})
	t.Run("./.keycap/runtime-token against the working directory", func(t *testing.T) {
		clearTokenEnv(t)
		dir := t.TempDir()
		writeToken(t, filepath.Join(dir, ".keycap", "runtime-token"))
		t.Chdir(dir)
		registersAsLocalRuntime(t)
	})
	t.Run("no token anywhere sends none", func(t *testing.T) {
		clearTokenEnv(t)
		t.Setenv("KEYCAP_DATA_DIR", t.TempDir())
		ctx := testContext(t)
		_, err := newKernel(t, stack.Kernel).ListTools(ctx)
		requireRefusal(t, err, codes.Unauthenticated, keycap.ReasonPrincipalCredentialMissing)
	})
	t.Run("an unreadable KEYCAP_RUNTIME_TOKEN_FILE is an error naming it", func(t *testing.T) {
		clearTokenEnv(t)
		missing := filepath.Join(t.TempDir(), "no-such-token")
		t.Setenv("KEYCAP_RUNTIME_TOKEN_FILE", missing)
		_, err := keycap.NewKernelClient(stack.Kernel)
		var cerr *keycap.ConfigError
		if !errors.As(err, &cerr) || cerr.Setting != "KEYCAP_RUNTIME_TOKEN_FILE" || !strings.Contains(err.Error(), missing) {
			t.Fatalf("NewKernelClient with KEYCAP_RUNTIME_TOKEN_FILE=%s: %v, want a *keycap.ConfigError naming the setting and the file", missing, err)
		}
		// WithToken decides: the lookup is not consulted.
		if k, err := keycap.NewKernelClient(stack.Kernel, keycap.WithToken(stack.RuntimeToken)); err != nil {
			t.Fatalf("NewKernelClient(WithToken) consulted the lookup: %v", err)
		} else {
			_ = k.Close()
		}
	})
}

func TestOperatorCreatesAPrincipalWhoseSecretAuthenticates(t *testing.T) {
	ctx := testContext(t)
	name, secret := newRuntimePrincipal(t, ctx)
	ops := newAccess(t, stack.Kernel, stack.AdminToken)

	_, err := ops.CreatePrincipal(ctx, name, keycap.RoleRuntime)
	requireRefusal(t, err, codes.AlreadyExists, "PRINCIPAL_EXISTS")

	principals, err := ops.ListPrincipals(ctx)
	if err != nil {
		t.Fatalf("ListPrincipals: %v", err)
	}
	seen := map[string]*kernelv1.Principal{}
	for _, p := range principals {
		seen[p.GetName()] = p
	}
	if p := seen[name]; p == nil || p.GetRole() != keycap.RoleRuntime || p.GetCreatedBy() != "admin" || p.GetRevokedAt() != nil {
		t.Fatalf("ListPrincipals: %s = %v, want an active runtime created by admin", name, p)
	}
	if seen["local-runtime"] == nil {
		t.Fatalf("ListPrincipals (%d) misses local-runtime", len(principals))
	}

	me, err := newAccess(t, stack.Kernel, secret).WhoAmI(ctx)
	if err != nil || me.GetPrincipal() != name || me.GetAuthMethod() != kernelv1.AuthMethod_AUTH_METHOD_BEARER {
		t.Fatalf("WhoAmI with the new secret = %v (err %v), want %s by bearer", me, err, name)
	}
	// Its kernel client registers a tool it then owns.
	k := newKernel(t, stack.Kernel, keycap.WithToken(secret))
	id := registerCharge(t, ctx, k, "go.e2e.owned")
	if tool, err := k.GetTool(ctx, id); err != nil || tool.GetOwner() != name {
		t.Fatalf("GetTool(%s) = %v (err %v), want owner %s", id, tool, err, name)
	}
}

func TestAnotherRuntimeUsesAToolOnlyWhileGranted(t *testing.T) {
	ctx := testContext(t)
	c := newClients(t)
	ops := newAccess(t, stack.Kernel, stack.AdminToken)
	name, secret := newRuntimePrincipal(t, ctx)
	other := newKernel(t, stack.Kernel, keycap.WithLedger(stack.Ledger), keycap.WithToken(secret))
	tool := keycap.Tool{ID: uniqueID("go.e2e.granted"), Effect: keycap.Idempotent(keycap.KeyDerivation{Fields: []string{"/order_id"}})}
	if _, err := c.kernel.RegisterTool(ctx, tool); err != nil {
		t.Fatalf("RegisterTool: %v", err)
	}
	args := `{"order_id":"o-` + uniqueID("g") + `"}`

	_, err := other.BeginCall(ctx, tool.ID, args)
	requireRefusal(t, err, codes.PermissionDenied, keycap.ReasonToolNotGranted)
	_, err = other.RegisterTool(ctx, tool)
	requireRefusal(t, err, codes.PermissionDenied, keycap.ReasonToolOwnedByOther)

	// The kernel's refusal is recorded, attributed to the principal, and the
	// Service filter tells it from the ledger's.
	var found bool
	for deadline := time.Now().Add(10 * time.Second); !found && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		rs, err := c.admin.ListRejections(ctx, keycap.RejectionFilter{ToolID: tool.ID, Service: "kernel", Reason: keycap.ReasonToolNotGranted})
		if err != nil {
			t.Fatalf("ListRejections(kernel): %v", err)
		}
		for _, r := range rs {
			if r.GetService() != "kernel" {
				t.Fatalf("ListRejections(service kernel) returned %v", r)
			}
			found = found || r.GetPrincipal() == name
		}
	}
	if !found {
		t.Fatalf("no kernel refusal TOOL_NOT_GRANTED of %s recorded against %s", name, tool.ID)
	}
	if rs, err := c.admin.ListRejections(ctx, keycap.RejectionFilter{ToolID: tool.ID, Service: "ledger"}); err != nil || len(rs) != 0 {
		t.Fatalf("ListRejections(%s, service ledger) = %v (err %v), want none: only the kernel refused", tool.ID, rs, err)
	}

	granted, err := ops.AddGrant(ctx, tool.ID, name)
	if err != nil || granted.GetGrant().GetPrincipal() != name || granted.GetGrant().GetToolId() != tool.ID || granted.GetAlreadyGranted() {
		t.Fatalf("AddGrant = %v (err %v)", granted, err)
	}
	if again, err := ops.AddGrant(ctx, tool.ID, name); err != nil || !again.GetAlreadyGranted() {
		t.Fatalf("AddGrant again = %v (err %v), want AlreadyGranted", again, err)
	}
	byTool, err := ops.ListGrants(ctx, keycap.GrantFilter{ToolID: tool.ID})
	if err != nil || len(byTool) != 1 || byTool[0].GetPrincipal() != name || byTool[0].GetGrantedBy() != "admin" {
		t.Fatalf("ListGrants(tool %s) = %v (err %v), want the one grant to %s", tool.ID, byTool, err, name)
	}
	byPrincipal, err := ops.ListGrants(ctx, keycap.GrantFilter{Principal: name})
	if err != nil || len(byPrincipal) != 1 || byPrincipal[0].GetToolId() != tool.ID {
		t.Fatalf("ListGrants(principal %s) = %v (err %v), want the one grant on %s", name, byPrincipal, err, tool.ID)
	}

	h, err := other.Begin(ctx, tool.ID, args)
	if err != nil {
		t.Fatalf("granted Begin: %v", err)
	}
	if h.Call().GetPrincipal() != name {
		t.Fatalf("call principal = %q, want %s", h.Call().GetPrincipal(), name)
	}
	w, err := h.Write(ctx, []byte("granted"))
	if err != nil || w.GetEntry().GetPrincipal() != name {
		t.Fatalf("granted Write = %v (err %v), want an entry of principal %s", w, err, name)
	}
	if _, err := h.Complete(ctx, keycap.Succeeded, ""); err != nil {
		t.Fatalf("Complete: %v", err)
	}

	if removed, err := ops.RemoveGrant(ctx, tool.ID, name); err != nil || !removed.GetRemoved() {
		t.Fatalf("RemoveGrant = %v (err %v)", removed, err)
	}
	if removed, err := ops.RemoveGrant(ctx, tool.ID, name); err != nil || removed.GetRemoved() {
		t.Fatalf("RemoveGrant again = %v (err %v), want Removed false", removed, err)
	}
	_, err = other.BeginCall(ctx, tool.ID, args)
	requireRefusal(t, err, codes.PermissionDenied, keycap.ReasonToolNotGranted)
	// The owner keeps its access.
	if _, err := c.kernel.BeginCall(ctx, tool.ID, args); err != nil {
		t.Fatalf("owner BeginCall: %v", err)
	}
}

func TestRolesAreEnforced(t *testing.T) {
	ctx := testContext(t)
	c := newClients(t)
	toolID := registerCharge(t, ctx, c.kernel, "go.e2e.roles")
	// An operator lists and settles calls; it does not begin them.
	_, err := newKernel(t, stack.Kernel, keycap.WithToken(stack.AdminToken)).BeginCall(ctx, toolID, `{"order_id":"o-1"}`)
	requireRefusal(t, err, codes.PermissionDenied, keycap.ReasonRuntimeRequired)
	// A runtime does not manage principals.
	_, err = newAccess(t, stack.Kernel, stack.RuntimeToken).CreatePrincipal(ctx, uniqueID("go-e2e-nope"), keycap.RoleRuntime)
	requireRefusal(t, err, codes.PermissionDenied, keycap.ReasonOperatorRequired)
}

func TestRevokedPrincipalIsRefused(t *testing.T) {
	ctx := testContext(t)
	name, secret := newRuntimePrincipal(t, ctx)
	ops := newAccess(t, stack.Kernel, stack.AdminToken)
	who := newAccess(t, stack.Kernel, secret)
	if _, err := who.WhoAmI(ctx); err != nil {
		t.Fatalf("WhoAmI before revocation: %v", err)
	}
	res, err := ops.RevokePrincipal(ctx, name)
	if err != nil || res.GetPrincipal().GetRevokedAt() == nil || res.GetPrincipal().GetRevokedBy() != "admin" || res.GetAlreadyRevoked() {
		t.Fatalf("RevokePrincipal = %v (err %v)", res, err)
	}
	if again, err := ops.RevokePrincipal(ctx, name); err != nil || !again.GetAlreadyRevoked() {
		t.Fatalf("RevokePrincipal again = %v (err %v), want AlreadyRevoked", again, err)
	}
	// Within the kernel's principal cache lifetime (default 2 s).
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err = who.WhoAmI(ctx)
		if keycap.ReasonOf(err) == keycap.ReasonPrincipalRevoked || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	requireRefusal(t, err, codes.Unauthenticated, keycap.ReasonPrincipalRevoked)
}
