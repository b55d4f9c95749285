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
// A request that breaks a rule written in proto/ (protovalidate; today those
// of RegisterTool) is refused before sending with the reason the kernel would
// give, read from the generated descriptors, and a FieldViolation per broken
// rule; Tool.Validate reports the same refusal without a connection.
//
// The kernel authenticates every caller. A KernelClient sends the runtime's
// bearer secret: WithToken's, else by the default lookup (RuntimeTokenFromEnv:
// KEYCAP_RUNTIME_TOKEN, the file KEYCAP_RUNTIME_TOKEN_FILE names, else
// $KEYCAP_DATA_DIR/runtime-token, the data dir by default the nearest .keycap
// folder in the working directory or above it, which `make run` creates). A
// kernel call refused PRINCIPAL_CREDENTIAL_MISSING without a bearer says where
// that lookup looked (MissingCredentialHint). WithTLS (or
// TLSFromEnv) speaks TLS to any listener, pinning a CA and presenting a client
// certificate; with WithToken("") that certificate alone proves the principal.
// AccessClient manages principals and grants and answers WhoAmI.
//
// Every call waits for its service to be ready within its deadline (the
// context's, else WithCallTimeout's): a kernel or ledger that is restarting is
// waited for, and nothing is sent before it is up. An UNAVAILABLE answer,
// keycap's "retry", is resent with capped, jittered exponential backoff until
// that deadline, then returned; no other code is resent. The one exception is
// the ledger write of a single-use (Unsafe, Queryable) capability, never
// resent: had it taken effect with only its answer lost, the resend would be
// refused CAPABILITY_REUSED. When the service could not be reached at all
// (UNAVAILABLE, or DEADLINE_EXCEEDED with no connection, and no keycap reason),
// the message names the service, its address, the option that chose it and the
// deadline's settings; code and reason stay gRPC's, so UNAVAILABLE is still
// the retryable code. Raw() clients' errors carry the same messages.
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
