/**
 * The ledger scenarios' numbers rest on ghz sending each prepared request once: request i
 * carries key i and capability i, and a key sent twice is a duplicate, not a write. ghz
 * v0.120 drops `--total` when `--max-duration` is given (it sets the run to "until the
 * deadline" and cycles the data array), which turned the baseline's later requests into
 * duplicates (each a read by `_id`, a table scan on FerretDB) and the enforced writes'
 * into cached replays. This runs the real ghz against a server that counts what arrives.
 */
import { expect } from "chai";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { Server, ServerCredentials, type sendUnaryData, type ServerUnaryCall } from "@grpc/grpc-js";
import { BaselineServiceService, type WriteRequest, type WriteResponse } from "../gen/ts/keycap/bench/v1/baseline";
import { ensureGhz, runGhzChunk } from "../bench/ghz";
import { descriptorSetPath } from "../services/common/src/repo-paths";

describe("bench ghz chunks", function () {
  this.timeout(300_000);
  let server: Server;
  let address: string;
  let bin: string;
  let workDir: string;
  const received = new Map<string, number>();
  const tokens: string[] = [];

  before(async function () {
    this.timeout(600_000); // the first run installs ghz from the Go module proxy
    bin = (await ensureGhz((m) => process.stdout.write(`      ${m}\n`))).bin;
    workDir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-ghz-test-"));
    server = new Server();
    server.addService(BaselineServiceService, {
      write: (call: ServerUnaryCall<WriteRequest, WriteResponse>, done: sendUnaryData<WriteResponse>) => {
        received.set(call.request.key, (received.get(call.request.key) ?? 0) + 1);
        tokens.push(String(call.metadata.get("authorization")[0] ?? ""));
        done(null, { entry: undefined, duplicate: false, payloadMismatch: false });
      },
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
    address = `127.0.0.1:${port}`;
  });

  after(async () => {
    await new Promise<void>((resolve) => (server ? server.tryShutdown(() => resolve()) : resolve()));
    if (workDir) fs.rmSync(workDir, { recursive: true, force: true });
  });

  it("sends each item exactly once, with its own token, and reports one answer per item", async () => {
    const items = Array.from({ length: 300 }, (_, i) => ({ key: `k${i}`, token: `t${i}` }));
    const r = await runGhzChunk({
      bin,
      protoset: descriptorSetPath(),
      call: "keycap.bench.v1.BaselineService.Write",
      address,
      concurrency: 4,
      items,
      payload: Buffer.from("x"),
      workDir,
    });
    expect(r.statuses).to.deep.equal({ OK: 300 });
    expect(r.latenciesMs).to.have.length(300);
    expect(received.size).to.equal(300);
    expect(
      [...received.values()].every((n) => n === 1),
      "a key arrived more than once",
    ).to.equal(true);
    expect(new Set(tokens)).to.have.property("size", 300);
    expect(tokens).to.include("Bearer t299");
  });
});
