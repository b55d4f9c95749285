package keycap

import (
	"context"
	"time"

	ledgerv1 "github.com/keycap/keycap/clients/go/gen/keycap/ledger/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// RejectionFilter narrows AdminClient.ListRejections; zero fields match all.
type RejectionFilter struct {
	// ToolID: only refusals attributed to this tool.
	ToolID string
	// Reason: only this reason, e.g. ReasonKeyMismatch.
	Reason string
	// Since: only refusals at or after this time.
	Since time.Time
	// Until: only refusals before this time.
	Until time.Time
	// Service: only refusals of this service, "kernel" or "ledger".
	Service string
}

// AdminClient is the operator client of keycap.ledger.v1.LedgerAdminService;
// every call presents the admin credential. Safe for concurrent use. Close it
// when done.
type AdminClient struct {
	conn  *grpc.ClientConn
	raw   ledgerv1.LedgerAdminServiceClient
	token string
	o     options
}

// NewAdminClient connects (lazily) to the admin listener at address with the
// admin credential token. Pass WithTLS when the listener serves TLS.
func NewAdminClient(address, token string, opts ...Option) (*AdminClient, error) {
	o := buildOptions(opts)
	conn, err := dial(address, o, explainErrors(adminService, address, o, false))
	if err != nil {
		return nil, err
	}
	return &AdminClient{conn: conn, raw: ledgerv1.NewLedgerAdminServiceClient(conn), token: token, o: o}, nil
}

// Raw is the generated client (its calls need the credential in metadata; they
// get no default deadline, no wait for readiness and no resend either).
func (c *AdminClient) Raw() ledgerv1.LedgerAdminServiceClient { return c.raw }

// Close closes the connection.
func (c *AdminClient) Close() error { return c.conn.Close() }

// GetEntryByKey reads the entry recorded under an idempotency key; NOT_FOUND
// when there is none.
func (c *AdminClient) GetEntryByKey(ctx context.Context, key string) (*ledgerv1.Entry, error) {
	res, err := invoke(ctx, c.o.callTimeout, c.token, c.raw.GetEntry, &ledgerv1.GetEntryRequest{Selector: &ledgerv1.GetEntryRequest_Key{Key: key}})
	if err != nil {
		return nil, err
	}
	return res.GetEntry(), nil
}

// GetEntryByID reads one entry by its id; NOT_FOUND when there is none.
func (c *AdminClient) GetEntryByID(ctx context.Context, entryID string) (*ledgerv1.Entry, error) {
	res, err := invoke(ctx, c.o.callTimeout, c.token, c.raw.GetEntry, &ledgerv1.GetEntryRequest{Selector: &ledgerv1.GetEntryRequest_EntryId{EntryId: entryID}})
	if err != nil {
		return nil, err
	}
	return res.GetEntry(), nil
}

// ListEntries returns every entry (of one tool, or all when toolID is empty),
// newest first.
func (c *AdminClient) ListEntries(ctx context.Context, toolID string) ([]*ledgerv1.Entry, error) {
	var out []*ledgerv1.Entry
	token := ""
	for {
		res, err := invoke(ctx, c.o.callTimeout, c.token, c.raw.ListEntries, &ledgerv1.ListEntriesRequest{ToolId: toolID, PageSize: 1000, PageToken: token})
		if err != nil {
			return nil, err
		}
		out = append(out, res.GetEntries()...)
		if token = res.GetNextPageToken(); token == "" {
			return out, nil
		}
	}
}

// ListRejections returns every refusal matching f, newest first: the ledger's
// and the kernel's (Rejection.Service says which; Rejection.Principal is the
// kernel's authenticated caller or the capability's subject).
func (c *AdminClient) ListRejections(ctx context.Context, f RejectionFilter) ([]*ledgerv1.Rejection, error) {
	req := &ledgerv1.ListRejectionsRequest{ToolId: f.ToolID, Reason: f.Reason, Service: f.Service, PageSize: 1000}
	if !f.Since.IsZero() {
		req.Since = timestamppb.New(f.Since)
	}
	if !f.Until.IsZero() {
		req.Until = timestamppb.New(f.Until)
	}
	var out []*ledgerv1.Rejection
	for {
		res, err := invoke(ctx, c.o.callTimeout, c.token, c.raw.ListRejections, req)
		if err != nil {
			return nil, err
		}
		out = append(out, res.GetRejections()...)
		if req.PageToken = res.GetNextPageToken(); req.PageToken == "" {
			return out, nil
		}
	}
}

// Stats returns counts of entries, duplicates, payload mismatches and refusals.
func (c *AdminClient) Stats(ctx context.Context) (*ledgerv1.GetStatsResponse, error) {
	return invoke(ctx, c.o.callTimeout, c.token, c.raw.GetStats, &ledgerv1.GetStatsRequest{})
}
