package keycap_test

// Issue 14, against the real kernel: the refusal the Go client makes before
// sending is the kernel's own answer to the same request sent raw through the
// generated stub (code, reason, field, every field violation), and a valid
// tool still registers.

import (
	"fmt"
	"slices"
	"testing"

	kernelv1 "github.com/keycap/keycap/clients/go/gen/keycap/kernel/v1"
	"github.com/keycap/keycap/clients/go/keycap"
	"google.golang.org/grpc/codes"
)

func TestRequestRulesRefuseAsTheKernelDoes(t *testing.T) {
	ctx := testContext(t)
	c := newClients(t)
	cases := ruleCases(uniqueID("go.e2e.rules"))
	cases = append(cases, ruleCase{"several broken rules", helperTool("bad id", keycap.Idempotent(keycap.KeyDerivation{Fields: []string{"x", "x"}})), "INVALID_TOOL_ID", "tool.tool_id"})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The kernel's answer: sent raw, nothing checked on this side.
			_, rawErr := c.kernel.Raw().RegisterTool(ctx, &kernelv1.RegisterToolRequest{Tool: tc.tool})
			server := requireRefusal(t, keycap.FromError(rawErr), codes.InvalidArgument, tc.reason)
			// The client's refusal of the same request, made before sending.
			_, err := c.kernel.RegisterToolProto(ctx, tc.tool)
			client := requireRuleRefusal(t, err, tc.reason, tc.field)

			if client.Code != server.Code || client.Reason != server.Reason || client.Metadata["field"] != server.Metadata["field"] {
				t.Fatalf("client %s %s %v, kernel %s %s %v", client.Code, client.Reason, client.Metadata, server.Code, server.Reason, server.Metadata)
			}
			if !slices.Equal(client.FieldViolations, server.FieldViolations) {
				t.Fatalf("field violations differ:\n client %s\n kernel %s", violations(client), violations(server))
			}
			if want := server.Message + " (not sent)"; client.Message != want {
				t.Fatalf("message %q, want the kernel's %q", client.Message, want)
			}
		})
	}
}

func violations(e *keycap.Error) string {
	s := ""
	for _, v := range e.FieldViolations {
		s += fmt.Sprintf("\n  %s %s: %s", v.Field, v.Reason, v.Description)
	}
	return s
}

func TestRequestRulesLetAValidToolRegister(t *testing.T) {
	ctx := testContext(t)
	c := newClients(t)
	for _, tool := range validTools(uniqueID("go.e2e.rules.ok")) {
		res, err := c.kernel.RegisterTool(ctx, tool)
		if err != nil {
			t.Fatalf("RegisterTool(%s): %v", tool.ID, err)
		}
		if res.GetAlreadyRegistered() || res.GetTool().GetToolId() != tool.ID {
			t.Fatalf("RegisterTool(%s) answered %v", tool.ID, res)
		}
		got, err := c.kernel.GetTool(ctx, tool.ID)
		if err != nil || got.GetEffectClass().GetKind() == nil {
			t.Fatalf("GetTool(%s) = %v, %v", tool.ID, got, err)
		}
	}
}
