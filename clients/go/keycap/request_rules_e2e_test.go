package keycap_test

// Issue 14, against the real kernel: the refusal the Go client makes before
// sending is the kernel's own answer to the same request sent raw through the
// generated stub (code, reason, field, every field violation), and a valid
// tool still registers.

import (
	"context"
	"fmt"
	"slices"
	"strings"
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

// callRuleCase is a call request that breaks one id or limit rule of
// kernel.proto (issue 31: once checked by hand in the kernel), sent raw and,
// where the client has a method that builds it, through the client.
type callRuleCase struct {
	name   string
	raw    func(ctx context.Context, k kernelv1.KernelServiceClient) error
	client func(ctx context.Context, k *keycap.KernelClient) error
	reason string
	field  string
}

func callRuleCases() []callRuleCase {
	begin := func(req *kernelv1.BeginCallRequest) func(context.Context, kernelv1.KernelServiceClient) error {
		return func(ctx context.Context, k kernelv1.KernelServiceClient) error {
			_, err := k.BeginCall(ctx, req)
			return err
		}
	}
	long := func(s string, n int) string { return strings.Repeat(s, n) }
	ok := kernelv1.CallOutcome_CALL_OUTCOME_SUCCEEDED
	return []callRuleCase{
		{"a call id with a space", begin(&kernelv1.BeginCallRequest{ToolId: "go.rules.t", CallId: "a b", ArgumentsJson: "{}"}),
			func(ctx context.Context, k *keycap.KernelClient) error {
				_, err := k.BeginCall(ctx, "go.rules.t", "{}", keycap.WithCallID("a b"))
				return err
			}, "INVALID_CALL_ID", "call_id"},
		{"a 257-character run id", begin(&kernelv1.BeginCallRequest{ToolId: "go.rules.t", RunId: long("r", 257), ArgumentsJson: "{}"}),
			func(ctx context.Context, k *keycap.KernelClient) error {
				_, err := k.BeginCall(ctx, "go.rules.t", "{}", keycap.WithRunID(long("r", 257)))
				return err
			}, "INVALID_RUN_ID", "run_id"},
		{"a 257-character recorded run id", begin(&kernelv1.BeginCallRequest{ToolId: "go.rules.t", RunId: "r", Mode: kernelv1.RunMode_RUN_MODE_REPLAY, ReplayOfRunId: long("é", 257), ArgumentsJson: "{}"}),
			nil, "INVALID_RUN_MODE", "replay_of_run_id"},
		{"a completion without a call id",
			func(ctx context.Context, k kernelv1.KernelServiceClient) error {
				_, err := k.CompleteCall(ctx, &kernelv1.CompleteCallRequest{Outcome: ok})
				return err
			},
			func(ctx context.Context, k *keycap.KernelClient) error {
				_, err := k.Complete(ctx, "", keycap.Succeeded, "")
				return err
			}, "INVALID_CALL_ID", "call_id"},
		{"a 4097-character outcome detail",
			func(ctx context.Context, k kernelv1.KernelServiceClient) error {
				_, err := k.CompleteCall(ctx, &kernelv1.CompleteCallRequest{CallId: "c-1", Outcome: ok, OutcomeDetail: long("é", 4097)})
				return err
			},
			func(ctx context.Context, k *keycap.KernelClient) error {
				_, err := k.Complete(ctx, "c-1", keycap.Succeeded, long("é", 4097))
				return err
			}, "OUTCOME_DETAIL_TOO_LONG", "outcome_detail"},
		{"a resume of a call id with a slash",
			func(ctx context.Context, k kernelv1.KernelServiceClient) error {
				_, err := k.ResumeCall(ctx, &kernelv1.ResumeCallRequest{CallId: "a/b"})
				return err
			},
			func(ctx context.Context, k *keycap.KernelClient) error { _, err := k.Resume(ctx, "a/b"); return err },
			"INVALID_CALL_ID", "call_id"},
		{"a run listing without a run id",
			func(ctx context.Context, k kernelv1.KernelServiceClient) error {
				_, err := k.ListRunCalls(ctx, &kernelv1.ListRunCallsRequest{})
				return err
			}, nil, "INVALID_RUN_ID", "run_id"},
	}
}

func TestCallRequestRulesRefuseAsTheKernelDoes(t *testing.T) {
	ctx := testContext(t)
	c := newClients(t)
	for _, tc := range callRuleCases() {
		t.Run(tc.name, func(t *testing.T) {
			server := requireRefusal(t, keycap.FromError(tc.raw(ctx, c.kernel.Raw())), codes.InvalidArgument, tc.reason)
			if server.Metadata["field"] != tc.field {
				t.Fatalf("kernel's field %q, want %q", server.Metadata["field"], tc.field)
			}
			if tc.client == nil {
				return
			}
			client := requireRuleRefusal(t, tc.client(ctx, c.kernel), tc.reason, tc.field)
			if !slices.Equal(client.FieldViolations, server.FieldViolations) {
				t.Fatalf("field violations differ:\n client %s\n kernel %s", violations(client), violations(server))
			}
			if want := server.Message + " (not sent)"; client.Message != want {
				t.Fatalf("message %q, want the kernel's %q", client.Message, want)
			}
		})
	}
}
