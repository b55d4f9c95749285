package mcpsink

import (
	"encoding/json"
	"errors"

	"github.com/keycap/keycap/clients/go/sink"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// ErrorData is the JSON-RPC error's data on every refusal: the shape of the
// gateway's KeycapErrorData (services/mcp/src/call-errors.ts), so a host or
// framework branches on data.reason whichever of the two refused.
type ErrorData struct {
	Reason string `json:"reason"`
	// Domain is "keycap.dev".
	Domain string `json:"domain"`
	// ToolID is the kernel tool id of the tool that was called.
	ToolID   string            `json:"tool_id"`
	Metadata map[string]string `json:"metadata"`
}

// ToJSONRPCError is a refusal as the MCP client sees it. The code follows the
// gateway's split: a call refused for what it carries (its capability or its
// arguments) is Invalid params (-32602), as the gateway answers arguments it
// cannot key; keycap unable to decide (keys or store unavailable, retryable)
// is Internal error (-32603), as the gateway answers its own failures.
func ToJSONRPCError(err error, toolID string) *jsonrpc.Error {
	var r *sink.Refusal
	if !errors.As(err, &r) {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "keycap could not check the call: " + err.Error()}
	}
	data := ErrorData{Reason: r.Reason, Domain: sink.Domain, ToolID: toolID, Metadata: map[string]string{}}
	for k, v := range r.Metadata {
		data.Metadata[k] = v
	}
	raw, _ := json.Marshal(data)
	code := int64(jsonrpc.CodeInvalidParams)
	if r.Retryable() {
		code = jsonrpc.CodeInternalError
	}
	return &jsonrpc.Error{Code: code, Message: "keycap refused the call: " + r.Message, Data: raw}
}
