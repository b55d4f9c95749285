// Package chargeserver is the example keycap-aware MCP server's tools: a
// "charge" tool (Idempotent behind the gateway) that charges through a
// Stripe-like HTTP API under the kernel's key, and a "send_receipt" tool
// (Unsafe) that mails a receipt. Both run only under a capability the guard
// admitted; cmd main.go serves them over stdio.
package chargeserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/keycap/keycap/clients/go/mcpsink"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tool names, as the gateway's policy names them.
const (
	ChargeTool  = "charge"
	ReceiptTool = "send_receipt"
)

// Options configures New.
type Options struct {
	// Guard checks every governed call before its handler (required).
	Guard *mcpsink.Guard
	// API is the payments API's base URL, e.g. http://127.0.0.1:4242.
	API string
	// HTTP is the client for the API. Default http.DefaultClient.
	HTTP *http.Client
	// OnCall, if set, is called as a handler starts (metrics, tests).
	OnCall func(tool string)
}

// ChargeArgs are the charge tool's arguments; order_id and amount_cents
// identify one charge (the gateway's policy keys on them).
type ChargeArgs struct {
	OrderID     string `json:"order_id" jsonschema:"the order being paid"`
	AmountCents int64  `json:"amount_cents" jsonschema:"the amount, in cents"`
	Note        string `json:"note,omitempty" jsonschema:"free text, not part of the key"`
}

// Charge is the API's answer.
type Charge struct {
	ID          string `json:"id"`
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

// ReceiptArgs are the send_receipt tool's arguments.
type ReceiptArgs struct {
	To      string `json:"to"`
	OrderID string `json:"order_id"`
}

// Receipt is the API's answer.
type Receipt struct {
	ID string `json:"id"`
}

// New builds the server with the guard installed first, so a refused call
// reaches no handler.
func New(opts Options) *mcp.Server {
	if opts.HTTP == nil {
		opts.HTTP = http.DefaultClient
	}
	h := &handlers{opts: opts}
	server := mcp.NewServer(&mcp.Implementation{Name: "keycap-example-payments", Version: "1.0.0"}, nil)
	server.AddReceivingMiddleware(opts.Guard.Middleware)
	mcp.AddTool(server, &mcp.Tool{Name: ChargeTool, Description: "Charge an order (once per order and amount)."}, h.charge)
	mcp.AddTool(server, &mcp.Tool{Name: ReceiptTool, Description: "E-mail a receipt for an order."}, h.sendReceipt)
	return server
}

type handlers struct{ opts Options }

func (h *handlers) charge(ctx context.Context, _ *mcp.CallToolRequest, in ChargeArgs) (*mcp.CallToolResult, Charge, error) {
	h.started(ChargeTool)
	// The kernel's key, verified and bound to these arguments by the guard: the
	// API keeps one charge per key, so this handler's own retries (and the
	// gateway's after a lost answer) are one charge.
	key, ok := mcpsink.KeyFrom(ctx)
	if !ok {
		return nil, Charge{}, errors.New("charge runs only under a keycap capability")
	}
	var out Charge
	err := h.post(ctx, "/v1/charges", key, map[string]any{"order_id": in.OrderID, "amount_cents": in.AmountCents}, &out)
	return nil, out, err
}

func (h *handlers) sendReceipt(ctx context.Context, _ *mcp.CallToolRequest, in ReceiptArgs) (*mcp.CallToolResult, Receipt, error) {
	h.started(ReceiptTool)
	// Unsafe: no key. The capability is single use (the guard spent it), and
	// its id names this attempt for the API's own retry of the request.
	c, ok := mcpsink.CapabilityFrom(ctx)
	if !ok {
		return nil, Receipt{}, errors.New("send_receipt runs only under a keycap capability")
	}
	var out Receipt
	err := h.post(ctx, "/v1/receipts", c.JTI, map[string]any{"to": in.To, "order_id": in.OrderID}, &out)
	return nil, out, err
}

func (h *handlers) started(tool string) {
	if h.opts.OnCall != nil {
		h.opts.OnCall(tool)
	}
}

func (h *handlers) post(ctx context.Context, path, idempotencyKey string, body, out any) error {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.opts.API+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", idempotencyKey)
	res, err := h.opts.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("payments API: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("payments API: %s", res.Status)
	}
	return json.NewDecoder(res.Body).Decode(out)
}
