// Command call-bench drives whole calls (Begin, Write, Complete) through the Go
// client against a running kernel and ledger, at one concurrency, with the
// client's batching on (the default) and off (WithoutBatching), alternating
// for the given time; it prints one JSON line for bench/client-calls.ts
// (make bench): each side's rate and the ratio, measured in the same run.
//
//	go run ./cmd/call-bench <kernel> <ledger> <runtime-token> <concurrency> <seconds>
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keycap/keycap/clients/go/keycap"
)

type result struct {
	Language       string  `json:"language"`
	Concurrency    int     `json:"concurrency"`
	BatchedPerS    float64 `json:"batched_per_s"`
	UnbatchedPerS  float64 `json:"unbatched_per_s"`
	Ratio          float64 `json:"ratio"`
	Errors         int64   `json:"errors"`
	SecondsPerSide float64 `json:"seconds_per_side"`
}

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: call-bench <kernel> <ledger> <runtime-token> <concurrency> <seconds>")
		os.Exit(2)
	}
	kernel, ledger, token := os.Args[1], os.Args[2], os.Args[3]
	conc, err1 := strconv.Atoi(os.Args[4])
	seconds, err2 := strconv.ParseFloat(os.Args[5], 64)
	if err1 != nil || err2 != nil || conc < 1 || seconds <= 0 {
		fmt.Fprintln(os.Stderr, "call-bench: concurrency and seconds must be positive numbers")
		os.Exit(2)
	}
	tool := "bench.go-calls." + randomID()
	setup, err := keycap.NewKernelClient(kernel, keycap.WithToken(token))
	must(err)
	_, err = setup.RegisterTool(context.Background(), keycap.Tool{ID: tool, Effect: keycap.Idempotent(keycap.KeyDerivation{Fields: []string{"/order_id"}})})
	must(err)
	_ = setup.Close()

	// Two rounds per side, alternating, so drift on a shared machine hits both alike.
	side := time.Duration(seconds / 4 * float64(time.Second))
	var calls [2]int64
	var errs atomic.Int64
	for round := 0; round < 4; round++ {
		batched := round%2 == 0
		opts := []keycap.Option{keycap.WithLedger(ledger), keycap.WithToken(token)}
		if !batched {
			opts = append(opts, keycap.WithoutBatching())
		}
		k, err := keycap.NewKernelClient(kernel, opts...)
		must(err)
		n := drive(k, tool, conc, side, &errs)
		_ = k.Close()
		if batched {
			calls[0] += n
		} else {
			calls[1] += n
		}
	}
	perSide := 2 * side.Seconds()
	r := result{Language: "go", Concurrency: conc, BatchedPerS: float64(calls[0]) / perSide, UnbatchedPerS: float64(calls[1]) / perSide, Errors: errs.Load(), SecondsPerSide: perSide}
	if r.UnbatchedPerS > 0 {
		r.Ratio = r.BatchedPerS / r.UnbatchedPerS
	}
	must(json.NewEncoder(os.Stdout).Encode(r))
}

// drive runs conc loops of whole calls for d and returns how many completed.
func drive(k *keycap.KernelClient, tool string, conc int, d time.Duration, errs *atomic.Int64) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var done atomic.Int64
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := wholeCall(k, tool); err != nil {
					errs.Add(1)
					continue
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return done.Load()
}

func wholeCall(k *keycap.KernelClient, tool string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := k.Begin(ctx, tool, map[string]string{"order_id": randomID()})
	if err != nil {
		return err
	}
	if _, err := h.Write(ctx, []byte("charged")); err != nil {
		return err
	}
	_, err = h.Complete(ctx, keycap.Succeeded, "")
	return err
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "call-bench:", err)
		os.Exit(1)
	}
}
