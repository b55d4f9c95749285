package keycap

import (
	"context"

	kernelv1 "github.com/keycap/keycap/clients/go/gen/keycap/kernel/v1"
	"google.golang.org/grpc"
)

// Role is a principal's role.
type Role = kernelv1.PrincipalRole

const (
	// RoleRuntime: an agent runtime. It registers tools (it then owns them)
	// and begins, resumes, completes and lists calls of tools it owns or was
	// granted.
	RoleRuntime Role = kernelv1.PrincipalRole_PRINCIPAL_ROLE_RUNTIME
	// RoleOperator: manages principals and grants, lists and settles any
	// call; never begins or resumes one.
	RoleOperator Role = kernelv1.PrincipalRole_PRINCIPAL_ROLE_OPERATOR
)

// GrantFilter narrows AccessClient.ListGrants; zero fields match all.
type GrantFilter struct {
	// ToolID: only grants on this tool.
	ToolID string
	// Principal: only grants to this principal.
	Principal string
}

// AccessClient is the client of keycap.kernel.v1.AccessService, served on the
// kernel listener: principals and grants (these need an operator credential:
// the admin token, or an operator principal's secret), and WhoAmI (any
// principal). Safe for concurrent use. Close it when done.
type AccessClient struct {
	conn *grpc.ClientConn
	raw  kernelv1.AccessServiceClient
	o    options
}

// NewAccessClient connects (lazily) to the kernel at address, presenting
// token as `authorization: Bearer <token>` on every call; token "" sends none
// (a principal proven by its TLS client certificate, see WithTLS). WithToken
// plays no part here.
func NewAccessClient(address, token string, opts ...Option) (*AccessClient, error) {
	o := buildOptions(opts)
	conn, err := dial(address, o, append(withBearer(token), explainErrors(accessService, address, o, token != ""))...)
	if err != nil {
		return nil, err
	}
	return &AccessClient{conn: conn, raw: kernelv1.NewAccessServiceClient(conn), o: o}, nil
}

// Raw is the generated client; its calls carry the token too (but no default
// deadline, no wait for readiness and no resend of UNAVAILABLE).
func (c *AccessClient) Raw() kernelv1.AccessServiceClient { return c.raw }

// Close closes the connection.
func (c *AccessClient) Close() error { return c.conn.Close() }

// CreatePrincipal creates a principal; the response's Secret is returned only
// this once. A name in use is refused with ALREADY_EXISTS PRINCIPAL_EXISTS.
func (c *AccessClient) CreatePrincipal(ctx context.Context, name string, role Role) (*kernelv1.CreatePrincipalResponse, error) {
	return invoke(ctx, c.o.callTimeout, "", c.raw.CreatePrincipal, &kernelv1.CreatePrincipalRequest{Name: name, Role: role})
}

// ListPrincipals returns every principal, revoked ones included, ordered by name.
func (c *AccessClient) ListPrincipals(ctx context.Context) ([]*kernelv1.Principal, error) {
	var out []*kernelv1.Principal
	token := ""
	for {
		res, err := invoke(ctx, c.o.callTimeout, "", c.raw.ListPrincipals, &kernelv1.ListPrincipalsRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			return nil, err
		}
		out = append(out, res.GetPrincipals()...)
		if token = res.GetNextPageToken(); token == "" {
			return out, nil
		}
	}
}

// RevokePrincipal revokes a principal (again: a no-op, AlreadyRevoked). Its
// secret and certificate mapping stop working within the kernel's principal
// cache lifetime (default 2 s).
func (c *AccessClient) RevokePrincipal(ctx context.Context, name string) (*kernelv1.RevokePrincipalResponse, error) {
	return invoke(ctx, c.o.callTimeout, "", c.raw.RevokePrincipal, &kernelv1.RevokePrincipalRequest{Name: name})
}

// AddGrant lets a runtime principal use a tool it does not own (again: a
// no-op, AlreadyGranted).
func (c *AccessClient) AddGrant(ctx context.Context, toolID, principal string) (*kernelv1.AddGrantResponse, error) {
	return invoke(ctx, c.o.callTimeout, "", c.raw.AddGrant, &kernelv1.AddGrantRequest{ToolId: toolID, Principal: principal})
}

// RemoveGrant removes a grant (Removed is false when there was none). A
// tool's owner keeps its access regardless.
func (c *AccessClient) RemoveGrant(ctx context.Context, toolID, principal string) (*kernelv1.RemoveGrantResponse, error) {
	return invoke(ctx, c.o.callTimeout, "", c.raw.RemoveGrant, &kernelv1.RemoveGrantRequest{ToolId: toolID, Principal: principal})
}

// ListGrants returns every grant matching f, ordered by tool id, then principal.
func (c *AccessClient) ListGrants(ctx context.Context, f GrantFilter) ([]*kernelv1.Grant, error) {
	req := &kernelv1.ListGrantsRequest{ToolId: f.ToolID, Principal: f.Principal, PageSize: 1000}
	var out []*kernelv1.Grant
	for {
		res, err := invoke(ctx, c.o.callTimeout, "", c.raw.ListGrants, req)
		if err != nil {
			return nil, err
		}
		out = append(out, res.GetGrants()...)
		if req.PageToken = res.GetNextPageToken(); req.PageToken == "" {
			return out, nil
		}
	}
}

// WhoAmI is the principal the kernel sees for this client's calls, its role,
// and how it was proven (AuthMethod: bearer, mTLS, or the admin credential).
func (c *AccessClient) WhoAmI(ctx context.Context) (*kernelv1.WhoAmIResponse, error) {
	return invoke(ctx, c.o.callTimeout, "", c.raw.WhoAmI, &kernelv1.WhoAmIRequest{})
}
