/**
 * A call's whole story (issue 33 item 4, ADR 0032), through the real services: the kernel's
 * GetCall and SearchCalls (operators, and the runtime owning the tool; nobody else), the ledger
 * keeping the payload hash of every differing write under a key, and `keycap calls show` /
 * `keycap calls search` telling it — begin, attempts, the refusals naming the call, the
 * entry's writes (first and mismatching), and who settled the call.
 */
import { expect } from "chai";
import { createHash } from "node:crypto";
import { AccessClient, AdminClient, KernelClient, KeycapClientError, LedgerClient, Runtime } from "../clients/ts/src";
import { ResumeAction } from "../gen/ts/keycap/kernel/v1/kernel";
import { refusal } from "./support/refusal";
import { runCli, serviceEnv, startService, type ServiceProcess } from "./support/processes";

const ADMIN = "story-test-admin-token-abcdefghijklmnop";
const FIRST = '{"charged":100}';
// A retry that carried another payload; with markup and a control character, as a hostile tool might.
const SECOND = '{"charged":250,"note":"<b>x</b>\u001b[2J"}';
const sha = (s: string): string => createHash("sha256").update(s).digest("hex");

interface StoryJson {
  callId: string;
  runId: string;
  principal: string;
  argumentsJson: string;
  key: string;
  state: string;
  outcome: string;
  attempt: number;
  completedBy: string;
  recoveryRefused?: { reason: string; by: string };
  refusals: { reason: string; service: string; attemptedKey: string }[];
  entry?: {
    callId: string;
    payloadMismatches: number;
    writes: { first: boolean; payloadMismatch: boolean; payloadSha256: string; payloadSize: number; preview: { text: string } }[];
  };
  timeline: { event: string; detail: string }[];
}

describe("a call's story: GetCall, SearchCalls, the writes under a key, keycap calls show / search (issue 33 item 4)", function () {
  this.timeout(300_000);
  let proc: ServiceProcess;
  let kernel: KernelClient;
  let operator: KernelClient;
  let key = "";
  let strangerRefusal: KeycapClientError | undefined;
  let strangerSearch: string[] = [];
  const env = (): Record<string, string> => ({
    KEYCAP_ADMIN_TOKEN: ADMIN,
    KEYCAP_ADMIN_ADDRESS: proc.endpoints.admin!,
    KEYCAP_KERNEL_ADDRESS: proc.endpoints.kernel!,
  });

  before(async function () {
    proc = await startService("all", serviceEnv({ KEYCAP_ADMIN_TOKEN: ADMIN }));
    kernel = new KernelClient(proc.endpoints.kernel!, { ledgerAddress: proc.endpoints.ledger!, coalesce: false });
    operator = new KernelClient(proc.endpoints.kernel!, { token: ADMIN });
    await kernel.registerTool({ id: "story.charge", effect: { kind: "idempotent", key: { fields: ["/order_id"] } } });
    await kernel.registerTool({ id: "story.transfer", effect: { kind: "unsafe" } });
    const ledger = new LedgerClient(proc.endpoints.ledger!);
    // story-a: refused once (a key that is not the kernel's), then writes the entry, then completes.
    const a = await kernel.beginCall("story.charge", '{"order_id":"S-1"}', { callId: "story-a", runId: "run-story" });
    key = a.call!.key;
    const refused = await refusal(ledger.writeWithCapability(a.capability, { key: "not-the-kernels-key", payload: Buffer.from("x") }));
    expect(refused.reason).to.equal("KEY_MISMATCH");
    expect((await ledger.writeWithCapability(a.capability, { key, payload: Buffer.from(FIRST) })).duplicate).to.equal(false);
    await kernel.completeCall("story-a", "succeeded", "charged once");
    // story-b: the same order again under another call id: the same key, another payload.
    const b = await kernel.beginCall("story.charge", '{"order_id":"S-1"}', { callId: "story-b", runId: "run-story" });
    const dup = await ledger.writeWithCapability(b.capability, { key, payload: Buffer.from(SECOND) });
    expect(dup).to.include({ duplicate: true, payloadMismatch: true });
    ledger.close();
    // story-u: an Unsafe call left pending; recovery hands it to an operator.
    await kernel.beginCall("story.transfer", '{"amount":9}', { callId: "story-u", runId: "run-other" });
    const steps = await new Runtime(kernel, []).recover({ toolIds: ["story.transfer"], includeUnknownTools: true });
    expect(steps.find((s) => s.callId === "story-u")?.result).to.equal("indeterminate");
    // story-r: begun, then resumed by recovery twice (a crash before its write): attempts 2 and 3.
    await kernel.beginCall("story.charge", '{"order_id":"S-3"}', { callId: "story-r" });
    expect((await kernel.resumeCall("story-r")).action).to.equal(ResumeAction.RESUME_ACTION_RETRY);
    expect((await kernel.resumeCall("story-r")).call?.attempt).to.equal(3);
    // A runtime neither owning nor granted the tool asks for story-a: refused, and recorded under the call.
    const access = new AccessClient(proc.endpoints.kernel!, ADMIN);
    const other = await access.createPrincipal("story-stranger", "runtime");
    access.close();
    const stranger = new KernelClient(proc.endpoints.kernel!, { token: other.secret });
    try {
      strangerRefusal = await refusal(stranger.getCall("story-a"));
      strangerSearch = (await stranger.searchCallsPage({ runId: "run-story" })).calls.map((c) => c.callId);
    } finally {
      stranger.close();
    }
  });

  after(async function () {
    kernel?.close();
    operator?.close();
    await proc?.stop("SIGKILL").catch(() => undefined);
  });

  it("GetCall answers operators and the runtime owning the tool, with who completed the call; another runtime is refused", async function () {
    const asOperator = await operator.getCall("story-a");
    expect(asOperator?.call).to.include({ callId: "story-a", runId: "run-story", principal: "local-runtime", key, argumentsJson: '{"order_id":"S-1"}' });
    expect(asOperator?.settlement?.completedBy).to.equal("local-runtime");
    expect(asOperator?.settlement?.completedAt).to.be.instanceOf(Date);
    expect(asOperator?.capability).to.include({ attempt: 1 });
    expect((await kernel.getCall("story-a"))?.call?.callId).to.equal("story-a");
    expect(await operator.getCall("story-nope")).to.equal(undefined);

    expect(strangerRefusal?.reason).to.equal("TOOL_NOT_GRANTED");
    expect(strangerRefusal?.message).to.include("keycap grants add story.charge story-stranger");
    // Its search finds none of the tool's calls.
    expect(strangerSearch).to.deep.equal([]);
    const bad = await refusal(operator.getCall("<script>"));
    expect(bad.reason).to.equal("INVALID_CALL_ID");
  });

  it("SearchCalls finds calls by call id, run id, key and principal, newest first and paged", async function () {
    const ids = async (by: Parameters<KernelClient["searchCallsPage"]>[0]): Promise<string[]> =>
      (await operator.searchCallsPage(by)).calls.map((c) => c.callId);
    expect(await ids({ runId: "run-story" })).to.deep.equal(["story-b", "story-a"]);
    expect(await ids({ key })).to.deep.equal(["story-b", "story-a"]);
    expect(await ids({ callId: "story-u" })).to.deep.equal(["story-u"]);
    expect(await ids({ principal: "local-runtime" })).to.include.members(["story-a", "story-b", "story-u"]);
    const first = await operator.searchCallsPage({ runId: "run-story" }, "", 1);
    expect(first.calls.map((c) => c.callId)).to.deep.equal(["story-b"]);
    const second = await operator.searchCallsPage({ runId: "run-story" }, first.nextPageToken, 1);
    expect(second.calls.map((c) => c.callId)).to.deep.equal(["story-a"]);
    expect(second.nextPageToken).to.equal("");
    const none = await refusal(operator.searchCallsPage({ runId: "" }));
    expect(none.codeName).to.equal("INVALID_ARGUMENT");
  });

  it("GetEntry lists the first write and each write whose payload differed: hash, size and first bytes", async function () {
    const admin = new AdminClient(proc.endpoints.admin!, ADMIN);
    try {
      const got = await admin.getEntryWithWrites({ key });
      expect(got?.entry?.payloadMismatchCount).to.equal(1);
      const writes = got!.writes.map((w) => ({
        first: w.first,
        mismatch: w.payloadMismatch,
        sha: w.payloadSha256,
        size: Number(w.payloadSize),
        call: w.callId,
      }));
      expect(writes).to.deep.equal([
        { first: true, mismatch: false, sha: sha(FIRST), size: FIRST.length, call: "story-a" },
        { first: false, mismatch: true, sha: sha(SECOND), size: Buffer.byteLength(SECOND), call: "story-b" },
      ]);
      expect(Buffer.from(got!.writes[1]!.payloadPreview).toString()).to.equal(SECOND);
    } finally {
      admin.close();
    }
  });

  it("keycap calls show --json: begin, the refusal naming the call, the entry's two payload hashes, who completed it", async function () {
    const r = await runCli(["calls", "show", "story-a", "--json"], env());
    expect(r.code, r.stderr).to.equal(0);
    const s = JSON.parse(r.stdout) as StoryJson;
    expect(s).to.include({
      callId: "story-a",
      runId: "run-story",
      principal: "local-runtime",
      key,
      state: "completed",
      outcome: "succeeded",
      completedBy: "local-runtime",
    });
    // The ledger's refusal of its write, and the kernel's of the stranger who asked for the call, newest first.
    expect(s.refusals.map((x) => [x.reason, x.service, x.attemptedKey])).to.deep.equal([
      ["TOOL_NOT_GRANTED", "kernel", ""],
      ["KEY_MISMATCH", "ledger", "not-the-kernels-key"],
    ]);
    expect(s.entry?.writes.map((w) => [w.first, w.payloadMismatch, w.payloadSha256])).to.deep.equal([
      [true, false, sha(FIRST)],
      [false, true, sha(SECOND)],
    ]);
    expect(s.entry?.writes[1]?.preview.text).to.equal(SECOND);
    expect(
      s.timeline.map((e) => e.event),
      JSON.stringify(s.timeline, null, 1),
    ).to.deep.equal([
      "begun",
      "refused",
      "write",
      "completed",
      // story-b's write under the same key, after story-a completed; then the stranger's GetCall.
      "write",
      "refused",
    ]);
  });

  it("keycap calls show prints the timeline as tables, both hashes whole, a payload's control characters escaped", async function () {
    const r = await runCli(["calls", "show", "story-a"], { ...env(), COLUMNS: "120" });
    expect(r.code, r.stderr).to.equal(0);
    expect(r.stdout).to.include("timeline:").and.include("KEY_MISMATCH").and.include("MISMATCH").and.include(sha(FIRST)).and.include(sha(SECOND));
    expect(r.stdout).to.match(/settled by\s*│?\s*local-runtime/);
    expect(r.stdout).to.include("\\u001b[2J").and.not.include("\u001b[2J");
    // keycap entry lists the same two writes under its key.
    const entry = await runCli(["entry", key], { ...env(), COLUMNS: "120" });
    expect(entry.code, entry.stderr).to.equal(0);
    expect(entry.stdout).to.include("writes under this key:").and.include("MISMATCH").and.include(sha(SECOND)).and.not.include("\u001b[2J");
  });

  it("an indeterminate call settled by an operator: the recovery that gave up and the operator who settled it", async function () {
    const done = await runCli(["complete", "story-u", "--outcome", "failed", "--detail", "no transfer at the bank"], env());
    expect(done.code, done.stderr).to.equal(0);
    const r = await runCli(["calls", "show", "story-u", "--json"], env());
    expect(r.code, r.stderr).to.equal(0);
    const s = JSON.parse(r.stdout) as StoryJson;
    expect(s).to.include({ state: "completed", outcome: "failed", completedBy: "admin" });
    expect(s.recoveryRefused).to.include({ reason: "UNSAFE_NOT_RESUMABLE", by: "local-runtime" });
    expect(s.entry).to.equal(undefined);
    // The recovery's refusal is in the audit too: told once, with the principal that resumed.
    expect(s.timeline.map((e) => e.event)).to.deep.equal(["begun", "refused", "completed"]);
    expect(s.timeline[1]!.detail).to.include("UNSAFE_NOT_RESUMABLE").and.include("local-runtime");
    expect(s.timeline[2]!.detail).to.include("failed by admin").and.include("no transfer at the bank");
  });

  it("each capability attempt: the recoveries that re-issued it, when and by whom", async function () {
    const r = await runCli(["calls", "show", "story-r", "--json"], env());
    expect(r.code, r.stderr).to.equal(0);
    const s = JSON.parse(r.stdout) as StoryJson & { resumes: { attempt: number; by: string; capabilityId: string }[] };
    expect(s).to.include({ attempt: 3, state: "pending" });
    expect(s.resumes.map((x) => [x.attempt, x.by])).to.deep.equal([
      [2, "local-runtime"],
      [3, "local-runtime"],
    ]);
    expect(new Set(s.resumes.map((x) => x.capabilityId)).size).to.equal(2);
    expect(s.timeline.map((e) => e.event)).to.deep.equal(["begun", "capability", "capability"]);
    expect(s.timeline[2]!.detail).to.include("attempt 3: resumed by local-runtime");
  });

  it("keycap calls search --run / --idempotency-key / --principal / --call, paged; a bad use and an unknown call say so", async function () {
    const run = await runCli(["calls", "search", "--run", "run-story"], { ...env(), COLUMNS: "200" });
    expect(run.code, run.stderr).to.equal(0);
    expect(run.stdout).to.include("story-a").and.include("story-b").and.not.include("story-u");
    const byKey = await runCli(["calls", "search", "--idempotency-key", key, "--json"], env());
    expect((JSON.parse(byKey.stdout) as { callId: string }[]).map((c) => c.callId)).to.deep.equal(["story-b", "story-a"]);
    const byPrincipal = await runCli(["calls", "search", "--principal", "local-runtime", "--limit", "1"], env());
    expect(byPrincipal.code, byPrincipal.stderr).to.equal(0);
    expect(byPrincipal.stderr).to.match(/more results: run the same command with --page \S+/);
    const byCall = await runCli(["calls", "search", "--call", "story-u", "--json"], env());
    expect((JSON.parse(byCall.stdout) as { callId: string; state: string }[]).map((c) => [c.callId, c.state])).to.deep.equal([["story-u", "completed"]]);
    const two = await runCli(["calls", "search", "--run", "a", "--idempotency-key", "b"], env());
    expect(two.code).to.equal(2);
    expect(two.stderr).to.include("exactly one of --call, --run, --idempotency-key or --principal");
    const missing = await runCli(["calls", "show", "story-nope"], env());
    expect(missing.code).to.equal(3);
    expect(missing.stderr).to.include("keycap calls search");
    // The pending listing still answers under the same command.
    const pending = await runCli(["calls", "--state", "indeterminate"], env());
    expect(pending.code, pending.stderr).to.equal(0);
  });

  it("a refusal by the kernel names the call too (BeginCall of a call id begun with other arguments)", async function () {
    const e = await refusal(kernel.beginCall("story.charge", '{"order_id":"S-9"}', { callId: "story-a" }));
    expect(e.reason).to.equal("CALL_ID_CONFLICT");
    const r = await runCli(["calls", "show", "story-a", "--json"], env());
    const s = JSON.parse(r.stdout) as StoryJson;
    expect(s.refusals.map((x) => [x.service, x.reason])).to.deep.include(["kernel", "CALL_ID_CONFLICT"]);
  });
});
