/**
 * Issue 14: ill-formed UTF-8 in a request's strings is refused, not replaced.
 * protobuf decoders turn each bad sequence into U+FFFD, so `{"v":"\xff"}` and
 * `{"v":"\xfe"}` would both have become `{"v":"\ufffd"}`: one key for two calls,
 * and journaled text the caller never sent. Sent here as raw bytes (no client
 * can produce them), to a real kernel.
 */
import { Client, credentials, Metadata, type ServiceError } from "@grpc/grpc-js";
import { BinaryWriter } from "@bufbuild/protobuf/wire";
import { expect } from "chai";
import { BeginCallRequest, BeginCallResponse } from "../gen/ts/keycap/kernel/v1/kernel";
import { readErrorInfo } from "../clients/ts/src/status-details";
import { withUtf8Check } from "../services/common/src/utf8-check";
import { KernelServiceService } from "../gen/ts/keycap/kernel/v1/kernel";
import { defineTool, KernelClient } from "../clients/ts/src";
import { serviceEnv, startService, TEST_RUNTIME_TOKEN, type ServiceProcess } from "./support/processes";

/** A BeginCallRequest with these exact bytes as arguments_json (field 4) and run_id (field 3). */
function rawBeginCall(toolId: string, callId: string, argumentBytes: number[], runIdBytes: number[] = []): Buffer {
  const w = new BinaryWriter();
  w.uint32((1 << 3) | 2).string(toolId);
  w.uint32((2 << 3) | 2).string(callId);
  if (runIdBytes.length > 0) w.uint32((3 << 3) | 2).bytes(Uint8Array.from(runIdBytes));
  w.uint32((4 << 3) | 2).bytes(Uint8Array.from(argumentBytes));
  return Buffer.from(w.finish());
}

const ascii = (s: string): number[] => [...Buffer.from(s, "utf8")];

describe("ill-formed UTF-8 (issue 14)", function () {
  this.timeout(60_000);
  let kernel: ServiceProcess;
  let raw: Client;
  let client: KernelClient;
  const tool = defineTool({ id: "utf8.charge", effect: { kind: "idempotent", key: { fields: ["/v"] } } });
  const runTool = defineTool({ id: "utf8.per-run", effect: { kind: "idempotent", key: { fields: ["/v"], contextFields: ["run_id"] } } });

  before(async function () {
    kernel = await startService("kernel", serviceEnv());
    client = new KernelClient(kernel.endpoints.kernel!);
    await client.registerTool(tool);
    await client.registerTool(runTool);
    raw = new Client(kernel.endpoints.kernel!, credentials.createInsecure());
  });
  after(async function () {
    raw.close();
    client.close();
    await kernel.stop();
  });

  function send(body: Buffer): Promise<BeginCallResponse> {
    const md = new Metadata();
    md.set("authorization", `Bearer ${TEST_RUNTIME_TOKEN}`);
    return new Promise((resolve, reject) =>
      raw.makeUnaryRequest(
        "/keycap.kernel.v1.KernelService/BeginCall",
        (b: Buffer) => b,
        (b: Buffer) => BeginCallResponse.decode(b),
        body,
        md,
        (err: ServiceError | null, res?: BeginCallResponse) => (err ? reject(err) : resolve(res!)),
      ),
    );
  }

  async function refusedAs(body: Buffer): Promise<string | undefined> {
    try {
      await send(body);
    } catch (err) {
      expect((err as ServiceError).code).to.equal(3); // INVALID_ARGUMENT
      return readErrorInfo(err)?.reason;
    }
    throw new Error("accepted");
  }

  for (const [name, bytes] of [
    ["\\xff", [0xff]],
    ["\\xfe", [0xfe]],
    ["a lone surrogate (CESU bytes)", [0xed, 0xa0, 0x80]],
    ["a truncated sequence", [0xe2, 0x82]],
  ] as const) {
    it(`refuses ${name} inside arguments_json as INVALID_UTF8, and journals nothing`, async function () {
      const callId = `utf8-${Buffer.from(name).toString("hex")}`;
      expect(await refusedAs(rawBeginCall(tool.id, callId, [...ascii('{"v":"'), ...bytes, ...ascii('"}')]))).to.equal("INVALID_UTF8");
      expect((await client.listPendingCalls(tool.id)).map((c) => c.callId)).to.not.include(callId);
    });
  }

  it("refuses ill-formed UTF-8 in run_id", async function () {
    expect(await refusedAs(rawBeginCall(tool.id, "utf8-run", ascii('{"v":"x"}'), [0x72, 0xff]))).to.equal("INVALID_UTF8");
  });

  // TextDecoder drops a leading U+FEFF unless told not to: "\uFEFFrun-1" became "run-1".
  it("keeps a leading byte order mark in run_id: two run ids, two keys, recorded exactly", async function () {
    const bom = [0xef, 0xbb, 0xbf];
    const withBom = await send(rawBeginCall(runTool.id, "utf8-bom-run", ascii('{"v":"x"}'), [...bom, ...ascii("run-1")]));
    const without = await send(rawBeginCall(runTool.id, "utf8-plain-run", ascii('{"v":"x"}'), ascii("run-1")));
    expect(withBom.call?.runId).to.equal("\uFEFFrun-1");
    expect(withBom.call?.key).to.not.equal(without.call?.key);
  });

  it("refuses a byte order mark in front of arguments_json (ARGUMENTS_NOT_JSON) instead of dropping it", async function () {
    expect(await refusedAs(rawBeginCall(tool.id, "utf8-bom-args", [0xef, 0xbb, 0xbf, ...ascii('{"v":"x"}')]))).to.equal("ARGUMENTS_NOT_JSON");
  });

  it("accepts U+FFFD itself, sent as well-formed UTF-8, and keeps it exactly", async function () {
    const res = await send(rawBeginCall(tool.id, "utf8-fffd", [...ascii('{"v":"'), 0xef, 0xbf, 0xbd, ...ascii('"}')]));
    expect(res.call?.argumentsJson).to.equal('{"v":"\ufffd"}');
  });

  it("decodes through the checking reader (ts-proto's requestDeserialize passes a reader on to decode)", function () {
    const checked = withUtf8Check(KernelServiceService).beginCall!;
    const ok = checked.requestDeserialize(
      Buffer.from(BeginCallRequest.encode({ toolId: "t", callId: "c", runId: "", argumentsJson: "{}", mode: 0, replayOfRunId: "", shadowsRunId: "" }).finish()),
    ) as BeginCallRequest;
    expect(ok.toolId).to.equal("t");
  });
});

describe("ill-formed UTF-8 in the TypeScript client (issue 14)", function () {
  it("refuses a lone surrogate in arguments or run id before sending (the encoder would send U+FFFD)", async function () {
    // Nothing listens here: a refusal that came from a server would time out instead.
    const client = new KernelClient("127.0.0.1:1");
    try {
      for (const [args, runId] of [
        ['{"v":"\uD800"}', ""],
        ['{"v":"\uDC00x"}', ""],
        ["{}", "run-\uD83D"],
      ] as const) {
        const e = await client.beginCall("utf8.charge", args, { runId, timeoutMs: 500 }).then(
          () => undefined,
          (err: unknown) => err as { codeName?: string; reason?: string },
        );
        expect([e?.codeName, e?.reason]).to.deep.equal(["INVALID_ARGUMENT", "INVALID_UTF8"]);
      }
    } finally {
      client.close();
    }
  });
});
