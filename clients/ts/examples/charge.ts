/**
 * A minimal keycap tool in TypeScript: it registers an Idempotent "charge" tool keyed on
 * the order id, runs one call through the Runtime (begin, the tool's write through its
 * capability handle, complete), and prints the ledger entry. Run it twice with the same
 * order id: the second write is a duplicate of the first, not a second charge.
 *
 *     make build && node dist/clients/ts/examples/charge.js [ORDER_ID] [--run RUN] [--replay-of RECORDED_RUN]
 *
 * `--run` names the agent run the call belongs to; `--replay-of` replays a recorded run
 * (docs/run-modes.md): the same call is matched to the recorded one and its write is
 * answered from the recorded entry, writing nothing.
 *
 * Addresses come from KEYCAP_KERNEL_ADDRESS and KEYCAP_LEDGER_ADDRESS, else the defaults
 * of `make run`. The kernel credential is the runtime token by the default lookup
 * (KEYCAP_RUNTIME_TOKEN, KEYCAP_RUNTIME_TOKEN_FILE, `$KEYCAP_DATA_DIR/runtime-token`,
 * `./.keycap/runtime-token`); TLS is on when KEYCAP_TLS_CA_FILE is set. Any failure is
 * one line on stderr and exit status 1; a service that does not answer is named with
 * the setting that holds its address.
 */
import { defineTool, KernelClient, KeycapClientError, Runtime, tlsFromEnv, ClientConfigError } from "../src";

/** A keycap service the example talks to, and the setting that names its address. */
interface Service {
  name: string;
  address: string;
  setting: string;
}

function service(name: string, setting: string, fallback: string): Service {
  return { name, setting, address: process.env[setting] || fallback };
}

/** What a call raised when its service never answered: no connection, or none in time. */
class Unreachable extends Error {}

/** Runs `step`, turning "no answer from the service" into one line that names it. */
async function via<T>(svc: Service, step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (err) {
    const e = KeycapClientError.from(err);
    if (e.reason === "UNAVAILABLE" || e.reason === "DEADLINE_EXCEEDED") {
      throw new Unreachable(`cannot reach the keycap ${svc.name} at ${svc.address} (${e.codeName}; set ${svc.setting}, or start it with \`make run\`)`);
    }
    throw e;
  }
}

const charge = defineTool({
  id: "examples.ts.charge",
  effect: { kind: "idempotent", key: { fields: ["/order_id"] } },
});

/** The command line: an order id, then `--run <id>` and `--replay-of <id>` in any order. */
function parseArgs(argv: readonly string[]): { orderId: string; runId: string; replayOf: string } {
  const out = { orderId: "order-42", runId: "", replayOf: "" };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] ?? "";
    if (a === "--run" || a === "--replay-of") {
      const value = argv[++i];
      if (!value) throw new Error(`${a} needs a run id`);
      if (a === "--run") out.runId = value;
      else out.replayOf = value;
    } else out.orderId = a;
  }
  return out;
}

async function main({ orderId, runId, replayOf }: { orderId: string; runId: string; replayOf: string }): Promise<void> {
  const kernelService = service("kernel", "KEYCAP_KERNEL_ADDRESS", "127.0.0.1:50051");
  const ledgerService = service("ledger", "KEYCAP_LEDGER_ADDRESS", "127.0.0.1:50052");
  const tls = tlsFromEnv();
  const kernel = new KernelClient(kernelService.address, { ledgerAddress: ledgerService.address, ...(tls ? { tls } : {}) });
  try {
    const runtime = new Runtime(kernel, [
      {
        definition: charge,
        // The tool: its one effect goes through the handle, always under the kernel's key.
        handler: async (args, handle) => {
          const res = await via(ledgerService, () => handle.write(JSON.stringify(args)));
          const what = res.replayed ? "replayed (the recorded entry; nothing written)" : res.duplicate ? "already charged (duplicate)" : "charged";
          console.log(`${what}: entry ${res.entry?.entryId ?? "?"} key ${handle.key}`);
        },
      },
    ]);
    await via(kernelService, () => runtime.registerAll());
    const mode = replayOf ? { mode: "replay" as const, replayOf } : {};
    await via(kernelService, () => runtime.run(charge.id, { order_id: orderId, amount_cents: 500 }, { runId, ...mode }));
  } finally {
    kernel.close();
  }
}

Promise.resolve()
  .then(() => main(parseArgs(process.argv.slice(2))))
  .catch((err: unknown) => {
    let line: string;
    if (err instanceof Unreachable) line = err.message;
    else if (err instanceof KeycapClientError) line = `refused: ${err.codeName} ${err.reason}: ${err.message}`;
    else if (err instanceof ClientConfigError) line = err.message;
    else line = err instanceof Error ? err.message : String(err);
    process.stderr.write(`charge: ${line.split("\n")[0]}\n`);
    process.exitCode = 1;
  });
