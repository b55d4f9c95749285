// Command charge is a minimal keycap tool in Go: it registers an Idempotent
// "charge" tool keyed on the order id, begins a call, records the charge in the
// ledger through the capability handle, and completes the call. Run it twice
// with the same -order: the second run's write is a duplicate, not a second
// charge.
//
//	go run ./examples/charge -order o-1001 -cents 500
//
// Addresses come from -kernel/-ledger, else KEYCAP_KERNEL_ADDRESS /
// KEYCAP_LEDGER_ADDRESS, else the defaults of `make run`. The kernel
// credential is the runtime token by the default lookup (KEYCAP_RUNTIME_TOKEN,
// KEYCAP_RUNTIME_TOKEN_FILE, $KEYCAP_DATA_DIR/runtime-token, ./.keycap/runtime-token);
// TLS is on when KEYCAP_TLS_CA_FILE (and, for mTLS, KEYCAP_TLS_CLIENT_CERT_FILE
// and KEYCAP_TLS_CLIENT_KEY_FILE) is set.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/keycap/keycap/clients/go/keycap"
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	kernelAddr := flag.String("kernel", envOr("KEYCAP_KERNEL_ADDRESS", "127.0.0.1:50051"), "kernel address")
	ledgerAddr := flag.String("ledger", envOr("KEYCAP_LEDGER_ADDRESS", "127.0.0.1:50052"), "ledger address")
	order := flag.String("order", "o-1001", "order id (the key is derived from it)")
	cents := flag.Int("cents", 500, "amount in cents")
	flag.Parse()
	log.SetFlags(0)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, *kernelAddr, *ledgerAddr, *order, *cents); err != nil {
		var kerr *keycap.Error
		if errors.As(err, &kerr) {
			log.Fatalf("charge: refused: %s %s: %s", kerr.CodeName(), kerr.Reason, kerr.Message)
		}
		log.Fatalf("charge: %v", err)
	}
}

func run(ctx context.Context, kernelAddr, ledgerAddr, order string, cents int) error {
	opts := []keycap.Option{keycap.WithLedger(ledgerAddr)}
	if t, ok := keycap.TLSFromEnv(); ok {
		opts = append(opts, keycap.WithTLS(t))
	}
	kernel, err := keycap.NewKernelClient(kernelAddr, opts...)
	if err != nil {
		return err
	}
	defer kernel.Close()

	const toolID = "example.go.charge"
	if _, err := kernel.RegisterTool(ctx, keycap.Tool{
		ID:     toolID,
		Effect: keycap.Idempotent(keycap.KeyDerivation{Fields: []string{"/order_id"}}),
	}); err != nil {
		return err
	}

	h, err := kernel.Begin(ctx, toolID, map[string]any{"order_id": order, "cents": cents})
	if err != nil {
		return err
	}
	res, err := h.Write(ctx, fmt.Appendf(nil, `{"order_id":%q,"charged_cents":%d}`, order, cents))
	if err != nil {
		_, _ = h.Complete(ctx, keycap.Failed, err.Error())
		return err
	}
	if _, err := h.Complete(ctx, keycap.Succeeded, ""); err != nil {
		return err
	}
	fmt.Printf("order %s: entry %s key %s duplicate=%v\n", order, res.GetEntry().GetEntryId(), h.Key(), res.GetDuplicate())
	return nil
}
