import { InvalidArgumentError, type Command } from "commander";
import { pathToFileURL } from "node:url";
import * as path from "node:path";
import { EffectKind, effectKindToJSON } from "../../../gen/ts/keycap/effect/v1/effect";
import type { Entry } from "../../../gen/ts/keycap/ledger/v1/ledger";
import type { Rejection } from "../../../gen/ts/keycap/ledger/v1/ledger_admin";
import { AccessClient, KernelClient, KeycapClientError, Runtime, type RuntimeTool } from "../../../clients/ts/src";
import type { Tool } from "../../../gen/ts/keycap/kernel/v1/kernel";
import { addAccessCommands } from "./access-commands";
import { addRunCommands } from "./run-commands";
import { addCallStoryCommands } from "./call-story-commands";
import {
  adminToken,
  explain,
  kernelAddress,
  ledgerAddress,
  NotFoundError,
  OperatorError,
  runtimeToken,
  UsageError,
  tlsOptions,
  withAdmin,
  withTlsOptions,
  type OperatorOptions,
} from "./operator-context";
import { newTable, print, printMoreHint, render } from "./output";
import { toolView } from "../../common/src/tool-view";
import { storyWrite, type StoryWrite } from "../../common/src/call-story";
import { SINK_SERVICE } from "../../common/src/sink-name";

function kind(k: EffectKind): string {
  return effectKindToJSON(k).replace("EFFECT_KIND_", "").toLowerCase();
}

function time(d: Date | undefined): string {
  return d ? d.toISOString() : "";
}

/** Shortens a call's arguments (up to 64 KiB) for a table; never an id or advice a later step needs (--json has them whole). */
function short(s: string, n: number): string {
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}

function rejectionsTable(rows: Rejection[]): string {
  if (rows.length === 0) return "no rejections";
  const t = newTable(["time", "service", "principal", "tool", "verified", "reason", "code", "attempted key", "bound key", "call", "peer", "count"]);
  for (const r of rows) {
    t.push([
      time(r.rejectedAt),
      r.service || "ledger",
      r.principal || "",
      r.toolId || "(unknown)",
      r.toolIdVerified ? "yes" : "no",
      r.reason,
      r.code,
      r.attemptedKey || r.attemptedRequestId,
      r.capabilityKey || r.capabilityRequestId,
      r.callId,
      r.peer,
      String(r.count),
    ]);
  }
  return render(t);
}

// Ids in full: the next command (keycap entry, keycap complete) takes them as printed.
function entriesTable(rows: Entry[]): string {
  if (rows.length === 0) return "no entries";
  const t = newTable(["recorded", "entry id", "tool", "class", "key / request id", "call", "attempt", "duplicates", "payload mismatch"]);
  for (const e of rows) {
    t.push([
      time(e.recordedAt),
      e.entryId,
      e.toolId,
      kind(e.effectKind),
      e.key || e.requestId,
      e.callId,
      String(e.attempt),
      String(e.duplicateCount),
      e.payloadMismatch ? `yes (${e.payloadMismatchCount})` : "no",
    ]);
  }
  return render(t);
}

/** One entry, every field on its own row. */
function entryTable(e: Entry): string {
  const t = newTable();
  t.push(
    { "entry id": e.entryId },
    { tool: e.toolId },
    { class: kind(e.effectKind) },
    { [e.key ? "key" : "request id"]: e.key || e.requestId },
    { call: e.callId },
    { attempt: String(e.attempt) },
    { recorded: time(e.recordedAt) },
    { duplicates: String(e.duplicateCount) },
    { "payload mismatch": e.payloadMismatch ? `yes (${e.payloadMismatchCount})` : "no" },
    { "payload sha256": e.payloadSha256 },
  );
  return render(t);
}

/** The first write and each that carried another payload, when there was one: hash, size, first bytes. */
function writesText(writes: StoryWrite[]): string {
  if (writes.length < 2) return "";
  const t = newTable(["write", "payload sha256", "bytes", "call / attempt", "payload (first bytes)"]);
  for (const w of writes) {
    t.push([
      w.first ? "first" : "MISMATCH",
      w.payloadSha256,
      String(w.payloadSize),
      `${w.callId} / ${w.attempt}`,
      `${JSON.stringify(w.preview.text)} (${w.preview.note})`,
    ]);
  }
  return `\nwrites under this key:\n${render(t)}`;
}

/** A derived key is base64url(SHA-256): 43 characters. */
const KEY_LENGTH = 43;

function entryNotFound(key: string | undefined, id: string | undefined): NotFoundError {
  if (id !== undefined) return new NotFoundError(`no entry with id ${JSON.stringify(id)}`);
  const k = key ?? "";
  const hint =
    k.includes("…") || k.length < KEY_LENGTH ? ` (a key is ${KEY_LENGTH} characters, this one has ${[...k].length}: copy it whole from keycap entries)` : "";
  return new NotFoundError(`no entry with key ${JSON.stringify(k)}${hint}`);
}

function parseTime(value: string): Date {
  const rel = /^(\d+)([smhd])$/.exec(value);
  if (rel) {
    const unit = { s: 1e3, m: 6e4, h: 3.6e6, d: 8.64e7 }[rel[2] as "s" | "m" | "h" | "d"];
    return new Date(Date.now() - Number(rel[1]) * unit);
  }
  const d = new Date(value);
  if (Number.isNaN(d.getTime())) throw new UsageError(`--since: expected an ISO time or a duration like 15m, 2h, 1d; got ${JSON.stringify(value)}`);
  return d;
}

/** Parses --limit: a whole number from 1 to 1000, else a usage error naming the option. */
function parseLimit(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < 1 || n > 1000) {
    throw new InvalidArgumentError(`expected a whole number from 1 to 1000, got ${JSON.stringify(value)}`);
  }
  return n;
}

/** Adds the operator commands (ledger inspection, tools, calls and recovery) to the program. */
export function addOperatorCommands(program: Command): void {
  addLedgerReadCommands(program);
  addToolCommands(program);
  addCallCommands(program);
  addRecoverCommand(program);
}

/** An operator command that reads the ledger admin API. */
const adminCommand = (c: Command): Command =>
  withTlsOptions(c)
    .option("--admin <host:port>", "ledger admin address (env KEYCAP_ADMIN_ADDRESS, default 127.0.0.1:50053)")
    .option("--token-file <path>", "admin credential file (default: KEYCAP_ADMIN_TOKEN, else $KEYCAP_DATA_DIR/admin-token)")
    .option("--json", "print JSON instead of a table");
// Kernel commands an operator runs: the admin credential is the built-in operator "admin".
const kernelOperator = (c: Command): Command =>
  withTlsOptions(c)
    .option("--kernel <host:port>", "kernel address (env KEYCAP_KERNEL_ADDRESS, default 127.0.0.1:50051)")
    .option("--token-file <path>", "operator credential file (default: KEYCAP_ADMIN_TOKEN, else $KEYCAP_DATA_DIR/admin-token)")
    .option("--json", "print JSON instead of a table");

/** rejections, entries, entry, stats: the ledger admin API. */
function addLedgerReadCommands(program: Command): void {
  adminCommand(program.command("rejections").description("refused kernel, ledger and sink calls, newest first"))
    .option("--service <service>", "kernel | ledger | sink:<name> | all", "all")
    .option("--tool <id>", "only refusals attributed to this tool id")
    .option("--reason <REASON>", "only this reason, e.g. KEY_MISMATCH")
    .option("--since <time>", "ISO time or a duration ago (15m, 2h, 1d)")
    .option("--limit <n>", "at most this many (1-1000)", parseLimit, 100)
    .option("--page <cursor>", 'the next page, from the previous run\'s "more results" line')
    .action(async (o: OperatorOptions & { service: string; tool?: string; reason?: string; since?: string; limit: number; page?: string }) => {
      if (!["kernel", "ledger", "all"].includes(o.service) && !SINK_SERVICE.test(o.service)) {
        throw new UsageError(`--service: expected kernel, ledger, sink:<name> or all, got ${JSON.stringify(o.service)}`);
      }
      const filter = {
        ...(o.service !== "all" ? { service: o.service } : {}),
        ...(o.tool ? { toolId: o.tool } : {}),
        ...(o.reason ? { reason: o.reason } : {}),
        ...(o.since ? { since: parseTime(o.since) } : {}),
      };
      const page = await withAdmin(o, (a) => a.listRejectionsPage(filter, o.page ?? "", o.limit));
      print(o, page.rejections, () => rejectionsTable(page.rejections));
      printMoreHint(page.nextPageToken);
    });

  adminCommand(program.command("entries").description("ledger entries (effects), newest first"))
    .option("--tool <id>", "only entries of this tool")
    .option("--limit <n>", "at most this many (1-1000)", parseLimit, 100)
    .option("--page <cursor>", 'the next page, from the previous run\'s "more results" line')
    .action(async (o: OperatorOptions & { tool?: string; limit: number; page?: string }) => {
      const page = await withAdmin(o, (a) => a.listEntriesPage(o.tool ?? "", o.page ?? "", o.limit));
      print(o, page.entries, () => entriesTable(page.entries));
      printMoreHint(page.nextPageToken);
    });

  adminCommand(program.command("entry").description("one entry, by idempotency key (or --id entry id)"))
    .argument("[key]", "the idempotency key")
    .option("--id <entryId>", "look up by entry id instead")
    .action(async (key: string | undefined, o: OperatorOptions & { id?: string }) => {
      if (!key && !o.id) throw new UsageError("entry: give a key or --id <entry id>");
      const got = await withAdmin(o, (a) => a.getEntryWithWrites(o.id ? { entryId: o.id } : { key: key! }));
      const entry = got?.entry;
      if (!got || !entry) throw entryNotFound(key, o.id);
      // --json stays the entry as before; the table adds the writes that differed (keycap calls show tells the rest).
      print(o, entry, () => entryTable(entry) + writesText(got.writes.map(storyWrite)));
    });

  adminCommand(program.command("stats").description("counts of entries, duplicates, mismatches and refusals")).action(async (o: OperatorOptions) => {
    const s = await withAdmin(o, (a) => a.stats());
    print(o, s, () => {
      const t = newTable();
      t.push(
        { entries: String(s.entries) },
        { duplicates: String(s.duplicates) },
        { "payload mismatches": String(s.payloadMismatches) },
        { rejections: String(s.rejections) },
        // Totals are counted as things are written (DESIGN §13), so they start somewhere.
        { "counted since": s.countedSince ? s.countedSince.toISOString() : "nothing counted yet" },
      );
      for (const [r, n] of Object.entries(s.rejectionsByReason)) t.push({ [`  reason ${r}`]: String(n) });
      for (const [tool, n] of Object.entries(s.rejectionsByTool)) t.push({ [`  tool ${tool || "(unknown)"}`]: String(n) });
      return render(t);
    });
  });
}

/** tools, tools show: the registered tools as the kernel holds them. */
function addToolCommands(program: Command): void {
  // The access client is opened only by the command that reads grants (`tools show`).
  const withKernel = async <T>(o: OperatorOptions, fn: (k: KernelClient, access: () => AccessClient) => Promise<T>): Promise<T> => {
    const at = kernelAddress(o);
    const tls = tlsOptions(o);
    const kernel = new KernelClient(at.address, { token: adminToken(o), ...(tls ? { tls } : {}) });
    let access: AccessClient | undefined;
    try {
      return await fn(kernel, () => (access ??= new AccessClient(at.address, adminToken(o), tls ? { tls } : {})));
    } catch (err) {
      throw explain(err, "kernel", at);
    } finally {
      kernel.close();
      access?.close();
    }
  };

  const tools = kernelOperator(
    program.command("tools").description("registered tools with their effect class and key derivation (as operator: every tool)"),
  ).action(async (o: OperatorOptions) => {
    const list = await withKernel(o, (k) => k.listTools());
    print(o, list.map(toolView), () => {
      if (list.length === 0) return "no tools registered";
      const t = newTable(["tool", "class", "key / request id from", "owner", "registered"]);
      for (const tool of list) {
        const v = toolView(tool);
        t.push([v.toolId, v.effectClass, v.keyFields.join(" ") || v.requestIdField, v.owner || "(none)", time(tool.registeredAt)]);
      }
      return render(t);
    });
  });
  kernelOperator(tools.command("show").description("one tool: effect class, derivation, argument schema, owner and grants"))
    .argument("<toolId>", "the tool id")
    .action(async (toolId: string, own: OperatorOptions) => {
      // `tools` takes the same options, so commander may hand them to it: read both.
      const o: OperatorOptions = { ...(tools.opts() as OperatorOptions), ...own };
      const found = await withKernel(o, async (k, a) => {
        const tool = await k.getTool(toolId).catch((err: unknown) => {
          if (KeycapClientError.from(err).reason === "TOOL_NOT_FOUND") return undefined;
          throw err;
        });
        return tool ? { tool: toolView(tool), grants: (await a().listGrants({ toolId })).map((g) => g.principal) } : undefined;
      });
      if (!found) throw new NotFoundError(`no tool ${JSON.stringify(toolId)} is registered (keycap tools lists them)`, "TOOL_NOT_FOUND");
      const v = { ...found.tool, grants: found.grants };
      print(o, v, () => {
        const t = newTable();
        t.push(
          { tool: v.toolId },
          { "effect class": v.effectClass },
          ...(v.effectClass === "idempotent"
            ? [
                { "key fields": v.keyFields.join(" ") },
                { "derivation version": String(v.derivationVersion) },
                { "context fields": v.contextFields.join(" ") || "(none)" },
              ]
            : v.effectClass === "queryable"
              ? [{ "request id field": v.requestIdField }]
              : []),
          { owner: v.owner || "(none)" },
          { grants: v.grants.join(" ") || "(none)" },
          { "argument schema": v.argumentsSchema === undefined ? "(none)" : JSON.stringify(v.argumentsSchema, null, 2) },
          ...(v.httpDestination ? [{ "HTTP destination": v.httpDestination }] : []),
        );
        return render(t);
      });
    });
}

/** calls, complete: calls left for recovery or for an operator. */
function addCallCommands(program: Command): void {
  const calls = kernelOperator(program.command("calls").description("calls left for recovery (pending) or for an operator (indeterminate); show one, search"));
  addCallStoryCommands(calls, kernelOperator, parseLimit);
  calls
    .option("--state <state>", "pending | indeterminate", "pending")
    .option("--tool <id>", "only calls of this tool")
    .action(async (o: OperatorOptions & { state: string; tool?: string }) => {
      if (o.state !== "pending" && o.state !== "indeterminate")
        throw new UsageError(`--state: expected pending or indeterminate, got ${JSON.stringify(o.state)}`);
      const at = kernelAddress(o);
      const tls = tlsOptions(o);
      const kernel = new KernelClient(at.address, { token: adminToken(o), ...(tls ? { tls } : {}) });
      try {
        const calls = o.state === "pending" ? await kernel.listPendingCalls(o.tool ?? "") : await kernel.listIndeterminateCalls(o.tool ?? "");
        print(o, calls, () => {
          if (calls.length === 0) return `no ${o.state} calls`;
          const t = newTable(["call", "tool", "class", "attempt", "begun", "key / request id", "arguments"]);
          for (const c of calls)
            t.push([c.callId, c.toolId, kind(c.effectKind), String(c.attempt), time(c.createdAt), c.key || c.requestId, short(c.argumentsJson, 80)]);
          return render(t);
        });
      } catch (err) {
        throw explain(err, "kernel", at);
      } finally {
        kernel.close();
      }
    });

  kernelOperator(program.command("complete").description("settle a call by hand (e.g. an indeterminate Unsafe call, once you know what happened)"))
    .argument("<callId>", "the call")
    .requiredOption("--outcome <outcome>", "succeeded | failed")
    .option("--detail <text>", "why (recorded with the call)", "")
    .action(async (callId: string, o: OperatorOptions & { outcome: string; detail: string }) => {
      if (o.outcome !== "succeeded" && o.outcome !== "failed")
        throw new UsageError(`--outcome: expected succeeded or failed, got ${JSON.stringify(o.outcome)}`);
      const at = kernelAddress(o);
      const tls = tlsOptions(o);
      const kernel = new KernelClient(at.address, { token: adminToken(o), ...(tls ? { tls } : {}) });
      try {
        const res = await kernel.completeCall(callId, o.outcome, o.detail);
        print(o, res, () => (res.alreadyCompleted ? `call ${callId} was already completed as ${o.outcome}` : `call ${callId} completed as ${o.outcome}`));
      } catch (err) {
        throw explain(err, "kernel", at);
      } finally {
        kernel.close();
      }
    });
}

/** recover: resume every pending call by its class, as a runtime. */
function addRecoverCommand(program: Command): void {
  withTlsOptions(program.command("recover"))
    .description("resume calls a crash left pending, each by its effect class (as a runtime principal: its credential by the clients' default lookup)")
    .option(
      "--runtime-token-file <path>",
      "runtime principal's secret (default: KEYCAP_RUNTIME_TOKEN, KEYCAP_RUNTIME_TOKEN_FILE, $KEYCAP_DATA_DIR/runtime-token)",
    )
    .option("--tool <id...>", "only calls of these tools")
    .option("--dry-run", "show what would be done, do nothing")
    .option("--handlers <module>", "a JS module exporting `tools: RuntimeTool[]` (the tools' code, to re-run Idempotent/Queryable calls)")
    .option("--kernel <host:port>", "kernel address (env KEYCAP_KERNEL_ADDRESS, default 127.0.0.1:50051)")
    .option("--ledger <host:port>", "ledger address (env KEYCAP_LEDGER_ADDRESS, default 127.0.0.1:50052)")
    .option("--json", "print JSON instead of a table")
    .action(async (o: OperatorOptions & { tool?: string[]; dryRun?: boolean; handlers?: string; runtimeTokenFile?: string }) => {
      const tools = o.handlers ? await loadHandlers(o.handlers) : [];
      const at = kernelAddress(o);
      const tls = tlsOptions(o);
      const kernel = new KernelClient(at.address, { ledgerAddress: ledgerAddress(o).address, token: runtimeToken(o), ...(tls ? { tls } : {}) });
      try {
        const runtime = new Runtime(kernel, tools);
        const steps = await runtime.recover({ ...(o.tool ? { toolIds: o.tool } : {}), dryRun: o.dryRun === true, includeUnknownTools: true });
        print(o, steps, () => {
          if (steps.length === 0) return "nothing to recover: no pending calls";
          const t = newTable(["call", "tool", "class", "attempt", "action", "result", "detail"]);
          for (const s of steps) t.push([s.callId, s.toolId, s.effect, String(s.attempt), s.plan, s.result, s.detail]);
          return render(t);
        });
        if (steps.some((s) => s.result === "failed")) process.exitCode = 1;
      } catch (err) {
        throw explain(err, "kernel", at);
      } finally {
        kernel.close();
      }
    });

  addAccessCommands(program, kernelOperator, print);
  addRunCommands(program, kernelOperator, print);
}

async function loadHandlers(modulePath: string): Promise<RuntimeTool[]> {
  const abs = path.resolve(modulePath);
  let mod: { tools?: unknown; default?: { tools?: unknown } };
  try {
    mod = (await import(pathToFileURL(abs).href)) as typeof mod;
  } catch (err) {
    throw new OperatorError(`--handlers: cannot load ${abs}: ${err instanceof Error ? err.message : String(err)}`);
  }
  const tools = mod.tools ?? mod.default?.tools;
  if (!Array.isArray(tools)) throw new OperatorError(`--handlers: ${abs} must export tools: RuntimeTool[]`);
  return tools as RuntimeTool[];
}

/** A tool as an operator reads it: names, not enum numbers (JSON and tables alike). */
