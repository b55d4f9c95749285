// Command mcpcharge is a small keycap-aware MCP server (stdio): its "charge"
// tool charges an order through a Stripe-like HTTP API with the kernel's
// idempotency key, and runs only under a capability for exactly that call;
// "send_receipt" is Unsafe and runs once per capability. Run it behind the
// gateway (docs/mcp-server-go.md):
//
//	upstreams:
//	  payments:
//	    command: /path/to/mcpcharge
//	    env: { KEYCAP_KERNEL_ADDRESS: "127.0.0.1:50051", PAYMENTS_API_URL: "http://127.0.0.1:4242" }
//	    tools:
//	      charge: { class: idempotent, key: [/order_id, /amount_cents] }
//	      send_receipt: { class: unsafe }
//
// Settings (flags, else environment): -name (MCPCHARGE_NAME, default
// "payments": the sink name and the policy's upstream name), -api
// (PAYMENTS_API_URL), -kernel (KEYCAP_KERNEL_ADDRESS: the kernel's signing
// keys), -mongodb (MONGODB_URI) and -database (KEYCAP_MONGODB_DATABASE,
// default keycap): refusals recorded for `keycap rejections --service
// sink:<name>` and spent capabilities remembered across restarts. Without
// MongoDB, spent capabilities are kept in memory and refusals only logged.
// stdout carries MCP only; logs go to stderr.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/keycap/keycap/clients/go/examples/mcpcharge/chargeserver"
	"github.com/keycap/keycap/clients/go/mcpsink"
	"github.com/keycap/keycap/clients/go/sink"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	name := flag.String("name", envOr("MCPCHARGE_NAME", "payments"), "server name: sink:<name>, and the gateway policy's upstream name")
	api := flag.String("api", envOr("PAYMENTS_API_URL", "http://127.0.0.1:4242"), "payments API base URL")
	kernel := flag.String("kernel", envOr("KEYCAP_KERNEL_ADDRESS", "127.0.0.1:50051"), "kernel address (signing keys)")
	mongoURI := flag.String("mongodb", os.Getenv("MONGODB_URI"), "keycap's MongoDB (refusals, spent capabilities)")
	database := flag.String("database", envOr("KEYCAP_MONGODB_DATABASE", "keycap"), "keycap's database")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, *name, *api, *kernel, *mongoURI, *database); err != nil {
		log.Error("mcpcharge stopped", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, name, api, kernel, mongoURI, database string) error {
	conn, err := grpc.NewClient(kernel, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	opts := mcpsink.Options{
		Name: name,
		// "" is the gateway's id for the tool: mcp:<name>/<tool>.
		Tools: map[string]string{chargeserver.ChargeTool: "", chargeserver.ReceiptTool: ""},
		Keys:  sink.NewKernelKeys(conn, sink.KernelKeysOptions{}),
		OnRefusal: func(e sink.RefusalEvent) {
			log.Warn("refused", "tool_id", e.ToolID, "reason", e.Refusal.Reason, "message", e.Refusal.Message)
		},
	}
	if mongoURI == "" {
		opts.SpentStore = sink.NewMemorySpentStore(nil)
	} else {
		client, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
		if err != nil {
			return err
		}
		defer func() { _ = client.Disconnect(context.Background()) }()
		db := client.Database(database)
		spent, err := sink.OpenMongoSpentStore(ctx, db, sink.MongoSpentStoreOptions{})
		if err != nil {
			return err
		}
		defer spent.Close()
		rec, err := sink.OpenMongoRecorder(ctx, db, name, sink.MongoRecorderOptions{Logger: log})
		if err != nil {
			return err
		}
		defer rec.Close(context.Background())
		opts.SpentStore, opts.Recorder = spent, rec
	}
	guard, err := mcpsink.New(opts)
	if err != nil {
		return err
	}
	server := chargeserver.New(chargeserver.Options{Guard: guard, API: api})
	return server.Run(ctx, &mcp.StdioTransport{})
}
