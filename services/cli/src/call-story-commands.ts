/**
 * `keycap calls show <call>` and `keycap calls search`: a call's whole story (issue 33 item 4,
 * ADR 0032) and the calls found by call id, run id, key or principal. The call comes from the
 * kernel (GetCall, SearchCalls, as the operator "admin"); its refusals and its entry's writes
 * from the ledger admin API, with the same admin credential.
 */
import type { Command } from "commander";
import type { Call } from "../../../gen/ts/keycap/kernel/v1/kernel";
import { callStory, STORY_REFUSALS, type CallStory } from "../../common/src/call-story";
import { NotFoundError, UsageError, withAdmin, withOperatorKernel, type OperatorOptions } from "./operator-context";
import { newTable, print, printMoreHint, render } from "./output";
import { effectKindToJSON } from "../../../gen/ts/keycap/effect/v1/effect";
import { CallOutcome, CallState } from "../../../gen/ts/keycap/kernel/v1/kernel";

type SearchOptions = OperatorOptions & { call?: string; run?: string; idempotencyKey?: string; principal?: string; limit: number; page?: string };

/** Adds `calls show` and `calls search` under `calls` (whose options commander may hand to it: both are read). */
export function addCallStoryCommands(calls: Command, kernelOperator: (c: Command) => Command, parseLimit: (v: string) => number): void {
  const opts = <T extends OperatorOptions>(own: T): T => ({ ...(calls.opts() as OperatorOptions), ...own }) as T;
  kernelOperator(calls.command("show").description("one call's whole story: begin, capability attempts, refusals naming it, its entry's writes, completion"))
    .option("--admin <host:port>", "ledger admin address (env KEYCAP_ADMIN_ADDRESS, default 127.0.0.1:50053)")
    .argument("<callId>", "the call id")
    .action(async (callId: string, own: OperatorOptions) => {
      const o = opts(own);
      const got = await withOperatorKernel(o, (k) => k.getCall(callId));
      if (!got)
        throw new NotFoundError(
          `no call ${JSON.stringify(callId)} in the journal (keycap calls search finds calls by run, key or principal)`,
          "CALL_NOT_FOUND",
        );
      const story = await withAdmin(o, (a) =>
        callStory(callId, {
          call: async () => got,
          refusals: (id, limit) => a.listRejectionsPage({ callId: id }, "", limit),
          entry: (key) => a.getEntryWithWrites({ key }),
        }),
      );
      if (!story) throw new NotFoundError(`no call ${JSON.stringify(callId)} in the journal`, "CALL_NOT_FOUND");
      print(o, story, () => storyText(story));
    });

  kernelOperator(calls.command("search").description("find calls by call id, run id, key or principal (one of them), newest first"))
    .option("--call <id>", "the call id")
    .option("--run <id>", "the run id given to BeginCall")
    // Not --key: that is the TLS client key file of every kernel command.
    .option("--idempotency-key <key>", "the idempotency key (the whole 43 characters)")
    .option("--principal <name>", "the principal that began the calls")
    .option("--limit <n>", "at most this many (1-1000)", parseLimit, 100)
    .option("--page <cursor>", 'the next page, from the previous run\'s "more results" line')
    .action(async (own: SearchOptions) => {
      const o = opts(own);
      const given = (["call", "run", "idempotencyKey", "principal"] as const).filter((f) => o[f] !== undefined);
      if (given.length !== 1) throw new UsageError("calls search: give exactly one of --call, --run, --idempotency-key or --principal");
      const f = given[0]!;
      const value = o[f]!;
      const by = f === "call" ? { callId: value } : f === "run" ? { runId: value } : f === "idempotencyKey" ? { key: value } : { principal: value };
      const page = await withOperatorKernel(o, (k) => k.searchCallsPage(by, o.page ?? "", o.limit));
      print(o, page.calls, () => (page.calls.length === 0 ? "no calls found" : callsTable(page.calls)));
      printMoreHint(page.nextPageToken);
    });
}

function time(d: Date | undefined): string {
  return d ? d.toISOString() : "";
}

function stateOf(c: Call): string {
  if (c.state === CallState.CALL_STATE_COMPLETED) return c.outcome === CallOutcome.CALL_OUTCOME_FAILED ? "failed" : "succeeded";
  return c.state === CallState.CALL_STATE_INDETERMINATE ? "indeterminate" : "pending";
}

function callsTable(calls: Call[]): string {
  const t = newTable(["begun", "call", "tool", "class", "run", "principal", "key / request id", "state"]);
  for (const c of calls) {
    t.push([
      time(c.createdAt),
      c.callId,
      c.toolId,
      effectKindToJSON(c.effectKind).replace("EFFECT_KIND_", "").toLowerCase(),
      c.runId,
      c.principal,
      c.key || c.requestId,
      stateOf(c),
    ]);
  }
  return render(t);
}

/** The story as three tables: the call, its timeline, its entry's writes. */
function storyText(s: CallStory): string {
  const head = newTable();
  head.push(
    { call: s.callId },
    { tool: s.toolId },
    { class: s.effectClass },
    { run: s.runId || "(none)" },
    { principal: s.principal || "(unknown)" },
    { [s.requestId ? "request id" : "key"]: s.requestId || s.key || "(none)" },
    { arguments: plain(s.argumentsJson) },
    { state: s.state === "completed" ? `completed: ${s.outcome}` : s.state },
    { attempt: `${s.attempt}${s.attempt > 1 ? ` (resumed ${s.attempt - 1} time(s))` : ""}` },
    { "settled by": s.completedBy || (s.completedAt ? "(not recorded)" : "(not settled)") },
  );
  const timeline = newTable(["time", "event", "detail"]);
  for (const e of s.timeline) timeline.push([time(e.at), e.event, plain(e.detail)]);
  const parts = [render(head), "timeline:", render(timeline)];
  if (s.refusalsTruncated) parts.push(`(the newest ${STORY_REFUSALS} refusals are shown: keycap rejections --json lists them all)`);
  if (s.entry) {
    const w = newTable(["write", "payload sha256", "bytes", "call / attempt", "payload (first bytes)"]);
    for (const x of s.entry.writes) {
      w.push([
        x.first ? "first" : x.payloadMismatch ? "MISMATCH" : "same",
        x.payloadSha256,
        String(x.payloadSize),
        `${x.callId} / ${x.attempt}`,
        previewCell(x.preview),
      ]);
    }
    parts.push(`entry ${s.entry.entryId}: ${s.entry.duplicates} duplicate write(s), ${s.entry.payloadMismatches} with a different payload`, render(w));
  } else if (s.key) {
    parts.push("entry: nothing written under the key yet");
  }
  return parts.join("\n");
}

/** A preview on one table cell: quoted, control characters as escapes, so a payload cannot move the terminal. */
function previewCell(p: { text: string; note: string }): string {
  return `${JSON.stringify(p.text)} (${p.note})`;
}

/** Text a caller chose (outcome details, refusal messages), its control characters shown as escapes. */
function plain(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}
