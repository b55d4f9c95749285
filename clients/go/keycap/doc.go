// Package keycap is the Go client of keycap: register tools with the kernel,
// begin calls, write to the ledger through a capability handle that always
// carries the kernel-derived key, inspect the ledger as an operator, and
// recover pending calls after a crash.
//
// Every error returned by this package for a failed RPC is a *Error carrying
// the gRPC code and the machine-readable reason from the google.rpc.ErrorInfo
// the services send; branch on the reason, never on the message:
//
//	res, err := handle.Write(ctx, payload)
//	var kerr *keycap.Error
//	if errors.As(err, &kerr) && kerr.Reason == keycap.ReasonKeyMismatch {
//		// the ledger refused a write under a key the kernel did not derive
//	}
//
// A typical tool:
//
//	kernel, err := keycap.NewKernelClient("127.0.0.1:50051", keycap.WithLedger("127.0.0.1:50052"))
//	if err != nil { ... }
//	defer kernel.Close()
//	_, err = kernel.RegisterTool(ctx, keycap.Tool{ID: "payments.charge",
//		Effect: keycap.Idempotent(keycap.KeyDerivation{Fields: []string{"/order_id"}})})
//	h, err := kernel.Begin(ctx, "payments.charge", map[string]any{"order_id": "o-1", "cents": 500})
//	res, err := h.Write(ctx, []byte(`{"charged":500}`))
//	_, err = h.Complete(ctx, keycap.Succeeded, "")
package keycap
