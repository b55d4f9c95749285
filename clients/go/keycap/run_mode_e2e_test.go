package keycap_test

// Run modes from Go (issue 30, ADR 0028), end to end on the real kernel and
// ledger: a recorded live run replayed with one option (the recorded outcomes,
// nothing written), a replay that diverges, a shadow run, Unsafe denied in
// both, and the same through the batch BeginMany.

import (
	"context"
	"fmt"
	"testing"

	"github.com/keycap/keycap/clients/go/keycap"
	"github.com/keycap/keycap/clients/go/reasons"
	"google.golang.org/grpc/codes"
)

// recordedRun is a recorded live run: charge A-1, transfer (Unsafe), charge A-2.
type recordedRun struct {
	runID, charge, transfer string
	callIDs, entries        []string
}

func chargeArgs(order string) map[string]any {
	return map[string]any{"order_id": order, "amount_cents": 1200}
}

var transferArgs = map[string]any{"to": "acct-9", "amount_cents": 50}

func recordRun(t *testing.T, ctx context.Context, c clients) recordedRun {
	t.Helper()
	r := recordedRun{runID: uniqueID("rec"), charge: uniqueID("go.modes.charge"), transfer: uniqueID("go.modes.transfer")}
	for _, tool := range []keycap.Tool{
		{ID: r.charge, Effect: keycap.Idempotent(keycap.KeyDerivation{Fields: []string{"/order_id"}, RunID: true})},
		{ID: r.transfer, Effect: keycap.Unsafe()},
	} {
		if _, err := c.kernel.RegisterTool(ctx, tool); err != nil {
			t.Fatal(err)
		}
	}
	for _, call := range []struct {
		tool string
		args map[string]any
	}{{r.charge, chargeArgs("A-1")}, {r.transfer, transferArgs}, {r.charge, chargeArgs("A-2")}} {
		h, err := c.kernel.Begin(ctx, call.tool, call.args, keycap.WithRunID(r.runID))
		if err != nil {
			t.Fatal(err)
		}
		res, err := h.Write(ctx, []byte(fmt.Sprint(call.args)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Complete(ctx, keycap.Succeeded, "written "+res.GetEntry().GetEntryId()); err != nil {
			t.Fatal(err)
		}
		r.callIDs = append(r.callIDs, h.CallID())
		if call.tool == r.charge {
			r.entries = append(r.entries, res.GetEntry().GetEntryId())
		}
	}
	return r
}

func entryCount(t *testing.T, ctx context.Context, c clients, r recordedRun) int {
	t.Helper()
	n := 0
	for _, tool := range []string{r.charge, r.transfer} {
		entries, err := c.admin.ListEntries(ctx, tool)
		if err != nil {
			t.Fatal(err)
		}
		n += len(entries)
	}
	return n
}

func TestAReplayGetsTheRecordedOutcomesWritesNothingAndDeniesUnsafe(t *testing.T) {
	ctx, c := testContext(t), newClients(t)
	r := recordRun(t, ctx, c)
	before := entryCount(t, ctx, c, r)
	replay, err := keycap.NewKernelClient(stack.Kernel, keycap.WithLedger(stack.Ledger), keycap.WithToken(stack.RuntimeToken), keycap.WithRunMode(keycap.Replay(r.runID)))
	if err != nil {
		t.Fatal(err)
	}
	defer replay.Close()
	run := keycap.WithRunID(r.runID + "-replay")

	for _, step := range []struct {
		i     int
		order string
	}{{0, "A-1"}, {2, "A-2"}} {
		i, order := step.i, step.order
		if i == 2 {
			_, err := replay.Begin(ctx, r.transfer, transferArgs, run)
			requireRefusal(t, err, codes.PermissionDenied, reasons.SandboxUnsafeDenied)
		}
		h, err := replay.Begin(ctx, r.charge, chargeArgs(order), run)
		if err != nil {
			t.Fatalf("position %d: %v", i, err)
		}
		entry := r.entries[i/2]
		if rec := h.Recorded(); rec.GetCallId() != r.callIDs[i] || rec.GetOutcomeDetail() != "written "+entry {
			t.Fatalf("position %d: recorded %v, want call %s written %s", i, rec, r.callIDs[i], entry)
		}
		res, err := h.Write(ctx, []byte("charged again"))
		if err != nil {
			t.Fatal(err)
		}
		if !res.GetDuplicate() || !res.GetReplayed() || res.GetEntry().GetEntryId() != entry {
			t.Fatalf("position %d: write %v, want the recorded entry %s replayed", i, res, entry)
		}
	}
	if n := entryCount(t, ctx, c, r); n != before {
		t.Fatalf("entries %d after the replay, %d before", n, before)
	}
	denials, err := c.admin.ListRejections(ctx, keycap.RejectionFilter{ToolID: r.transfer, Reason: reasons.SandboxUnsafeDenied})
	if err != nil || len(denials) != 1 {
		t.Fatalf("SANDBOX_UNSAFE_DENIED recorded against the transfer: %d (%v), want 1", len(denials), err)
	}
}

func TestAChangedArgumentDivergesNamingThePositionAndTheExpectedCall(t *testing.T) {
	ctx, c := testContext(t), newClients(t)
	r := recordRun(t, ctx, c)
	opts := []keycap.BeginOption{keycap.WithMode(keycap.Replay(r.runID)), keycap.WithRunID(r.runID + "-div")}
	if _, err := c.kernel.Begin(ctx, r.charge, chargeArgs("A-1"), opts...); err != nil {
		t.Fatal(err)
	}
	// Position 1 is the recorded transfer: a charge there diverges.
	_, err := c.kernel.Begin(ctx, r.charge, chargeArgs("A-9"), opts...)
	kerr := requireRefusal(t, err, codes.FailedPrecondition, reasons.ReplayDiverged)
	if kerr.Metadata["position"] != "1" || kerr.Metadata["expected_call_id"] != r.callIDs[1] || kerr.Metadata["expected_tool_id"] != r.transfer {
		t.Fatalf("divergence metadata %v, want position 1, call %s, tool %s", kerr.Metadata, r.callIDs[1], r.transfer)
	}
}

func TestAShadowRunWritesToTheShadowStoreOnlyAndDeniesUnsafe(t *testing.T) {
	ctx, c := testContext(t), newClients(t)
	r := recordRun(t, ctx, c)
	before := entryCount(t, ctx, c, r)
	run := keycap.WithRunID(r.runID + "-shadow")
	h, err := c.kernel.Begin(ctx, r.charge, chargeArgs("A-1"), keycap.WithMode(keycap.Shadow(r.runID)), run)
	if err != nil {
		t.Fatal(err)
	}
	if h.Recorded() != nil {
		t.Fatal("a shadow call has no recorded call")
	}
	res, err := h.Write(ctx, []byte("charged in shadow"))
	if err != nil || !res.GetShadow() || res.GetDuplicate() {
		t.Fatalf("shadow write %v (%v), want a new shadow entry", res, err)
	}
	_, err = c.kernel.Begin(ctx, r.transfer, transferArgs, keycap.WithMode(keycap.Shadow("")), run)
	requireRefusal(t, err, codes.PermissionDenied, reasons.SandboxUnsafeDenied)
	if n := entryCount(t, ctx, c, r); n != before {
		t.Fatalf("entries %d after the shadow run, %d before", n, before)
	}
}

func TestABatchBeginsEveryItemInTheModeEachAnsweredOnItsOwn(t *testing.T) {
	ctx, c := testContext(t), newClients(t)
	r := recordRun(t, ctx, c)
	before := entryCount(t, ctx, c, r)
	// A batch's items are begun concurrently and take replay positions in no
	// set order, so each item replays in a replay run of its own (position 0).
	results, err := c.kernel.BeginMany(ctx, []keycap.BeginItem{
		{ToolID: r.charge, Args: chargeArgs("A-1"), RunID: r.runID + "-b1"},
		{ToolID: r.transfer, Args: transferArgs, RunID: r.runID + "-b2"},
		{ToolID: r.charge, Args: chargeArgs("A-7"), RunID: r.runID + "-b3"},
	}, keycap.WithMode(keycap.Replay(r.runID)))
	if err != nil || len(results) != 3 {
		t.Fatalf("BeginMany: %d results, %v", len(results), err)
	}
	if results[0].Err != nil || results[0].Handle.Recorded().GetCallId() != r.callIDs[0] {
		t.Fatalf("item 0: %v, want the recorded call %s", results[0].Err, r.callIDs[0])
	}
	if res, err := results[0].Handle.Write(ctx, []byte("again")); err != nil || !res.GetReplayed() {
		t.Fatalf("item 0 write: %v (%v), want replayed", res, err)
	}
	requireRefusal(t, results[1].Err, codes.PermissionDenied, reasons.SandboxUnsafeDenied)
	kerr := requireRefusal(t, results[2].Err, codes.FailedPrecondition, reasons.ReplayDiverged)
	if kerr.Metadata["position"] != "0" || kerr.Metadata["expected_call_id"] != r.callIDs[0] {
		t.Fatalf("item 2 divergence metadata %v", kerr.Metadata)
	}
	if n := entryCount(t, ctx, c, r); n != before {
		t.Fatalf("entries %d after the batch, %d before", n, before)
	}
}
