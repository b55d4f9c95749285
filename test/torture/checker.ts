/**
 * The torture run's independent checker: it reads MongoDB directly (not
 * through keycap's services or domain code) and the workers' journals, and
 * re-derives every Idempotent call's key from its recorded arguments with its
 * own implementation of the published scheme (docs/decisions/0002): for the
 * torture tool's arguments (one string field), RFC 8785 canonical JSON is the
 * document below with members written in sorted order.
 */
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import { MongoClient, type Document } from "mongodb";
import { CHARGE, opOf } from "./torture-tools";
import { EXPECTED_ERROR_CODES } from "./verdict";

export interface CheckResult {
  planned: number;
  acknowledged: number;
  completed: number;
  entries: number;
  /** Effects beyond the first of one operation (counted from payloads, not keys). */
  duplicateEffects: number;
  /** Operations whose write the ledger acknowledged but that have no entry. */
  lostAcknowledgedWrites: number;
  /** Calls in the journal at the end (retention removes completed ones). */
  journaledCalls: number;
  /** Completed operations whose call is no longer in the journal: what retention removed. */
  sweptCalls: number;
  /** Calls neither completed nor indeterminate. */
  callsLeftPending: number;
  /** Pending calls with neither a pending copy nor their second marked unsettled (ADR 0034), or copies without a call. */
  orphans: number;
  /** Unsafe calls that were run again (an attempt beyond the first, or a second effect). */
  unsafeRetried: number;
  /** Unsafe calls waiting for an operator after recovery. */
  indeterminate: number;
  /** Journaled Idempotent calls whose stored key differs from the one re-derived here. */
  keyMismatches: number;
  /** Entries whose `_id` is not the effect id their call implies. */
  misfiledEntries: number;
  /** Sandbox calls (shadow and replay) journaled. */
  sandboxCalls: number;
  /** Writes of sandbox runs the ledger acknowledged: into the shadow store, answered from a recorded effect. */
  shadowAcks: number;
  replayAcks: number;
  /** Unsafe calls of sandbox runs denied, as they must be. */
  deniedUnsafe: number;
  /** Live effects of sandbox calls: an entry written by a shadow or replay call, or carrying a shadow op. */
  sandboxEffects: number;
  /** Unsafe calls journaled in a sandbox run (they must be denied before the journal). */
  sandboxUnsafeJournaled: number;
  /** Shadow writes the ledger acknowledged that the shadow store does not hold. */
  lostShadowWrites: number;
  /** Errors the workers saw, by gRPC code. */
  workerErrors: Record<string, number>;
  /** Some examples of each violation, for the report. */
  examples: Record<string, string[]>;
}

interface WorkerEvent {
  ev: string;
  op?: string;
  tool?: string;
  sandbox?: string;
  shadow?: boolean;
  replayed?: boolean;
  code?: string;
  phase?: string;
  reason?: string;
  message?: string;
}

export function readJournals(paths: readonly string[]): WorkerEvent[] {
  const events: WorkerEvent[] = [];
  for (const p of paths) {
    if (!fs.existsSync(p)) continue;
    for (const line of fs.readFileSync(p, "utf8").split("\n")) {
      if (!line) continue;
      try {
        events.push(JSON.parse(line) as WorkerEvent);
      } catch {
        // the last line of a SIGKILLed worker may be cut: nothing was claimed by it
      }
    }
  }
  return events;
}

/** The v1 key of torture.charge for one order, derived without keycap's code. */
export function expectedChargeKey(order: string): string {
  const doc = `{"context":{},"derivation_version":1,"fields":{"/order":${JSON.stringify(order)}},"tool_id":${JSON.stringify(CHARGE.id)}}`;
  return createHash("sha256").update("keycap/idempotency-key/v1\0", "utf8").update(doc, "utf8").digest("base64url");
}

/**
 * ADR 0034, read here independently of keycap's code: a live Idempotent call is completed by
 * the ledger entry of its key (`idem:<key>`) when that entry carries the call's id.
 */
function completedByEntry(call: Document, entryById: ReadonlyMap<string, Document>): boolean {
  if (call["effect"] !== "idempotent" || call["mode"] !== undefined || typeof call["key"] !== "string") return false;
  const entry = entryById.get(`idem:${call["key"]}`);
  return entry !== undefined && String(entry["call_id"]) === String(call["_id"]);
}

export async function check(mongoUri: string, database: string, journals: readonly string[]): Promise<CheckResult> {
  const events = readJournals(journals);
  const planned = new Set<string>();
  const acked = new Set<string>();
  const shadowOps = new Set<string>();
  const shadowAcked = new Set<string>();
  let replayAcks = 0;
  let deniedUnsafe = 0;
  const done = new Set<string>();
  const examples: Record<string, string[]> = {};
  const note = (kind: string, what: string): void => {
    const list = (examples[kind] ??= []);
    if (list.length < 5) list.push(what);
  };
  const workerErrors: Record<string, number> = {};
  for (const e of events) {
    if (e.ev === "plan" && e.op) planned.add(e.op);
    if (e.ev === "plan" && e.op && e.sandbox === "shadow") shadowOps.add(e.op);
    if (e.ev === "ack" && e.op && e.shadow) shadowAcked.add(e.op);
    else if (e.ev === "ack" && e.op) acked.add(e.op);
    if (e.ev === "ack" && e.replayed) replayAcks++;
    if (e.ev === "denied") deniedUnsafe++;
    if (e.ev === "done" && e.op) done.add(e.op);
    if (e.ev === "err" && e.code) {
      workerErrors[e.code] = (workerErrors[e.code] ?? 0) + 1;
      // the message is what lets a failing report be diagnosed without the kept work dir
      if (!EXPECTED_ERROR_CODES.includes(e.code)) note(`worker ${e.code}`, `${e.phase ?? ""} ${e.op ?? ""}: ${e.reason ?? ""} ${e.message ?? ""}`);
    }
  }

  const client = await MongoClient.connect(mongoUri, { serverSelectionTimeoutMS: 30_000 });
  try {
    const db = client.db(database);
    const all = async (name: string): Promise<Document[]> => db.collection(name).find({}).toArray();
    const [calls, completions, pendingCopies, entries, shadowEntries, unsettled] = await Promise.all([
      all("calls"),
      all("call_completions"),
      all("pending_calls"),
      all("entries"),
      all("shadow_entries"),
      all("unsettled_seconds"),
    ]);
    // Seconds a kernel replica marked before journaling calls in them and has not settled yet.
    const unsettledSeconds = new Set(unsettled.map((m) => String(m["lb"])));
    const sandboxCallIds = new Set(calls.filter((c) => c["mode"] === "shadow" || c["mode"] === "replay").map((c) => String(c["_id"])));
    const completed = new Set(completions.map((c) => String(c["_id"])));
    const copies = new Set(pendingCopies.map((c) => String(c["_id"])));
    const callIds = new Set(calls.map((c) => String(c["_id"])));

    const effectsPerOp = new Map<string, number>();
    let sandboxEffects = 0;
    const entryById = new Map<string, Document>();
    for (const en of entries) {
      entryById.set(String(en["_id"]), en);
      const op = payloadOp(en);
      if (op === undefined) {
        note("unreadablePayload", String(en["_id"]));
        continue;
      }
      effectsPerOp.set(op, (effectsPerOp.get(op) ?? 0) + 1);
      if (shadowOps.has(op) || sandboxCallIds.has(String(en["call_id"]))) {
        sandboxEffects++;
        note("sandboxEffects", `${String(en["_id"])}: op ${op}, call ${String(en["call_id"])}`);
      }
    }
    const shadowStored = new Set(shadowEntries.map((en) => payloadOp(en)).filter((op): op is string => op !== undefined));
    let lostShadowWrites = 0;
    for (const op of shadowAcked) {
      if (!shadowStored.has(op)) {
        lostShadowWrites++;
        note("lostShadowWrites", op);
      }
    }
    let duplicateEffects = 0;
    for (const [op, n] of effectsPerOp) {
      if (n > 1) {
        duplicateEffects += n - 1;
        note("duplicateEffects", `${op} ×${n}`);
      }
    }
    let lost = 0;
    for (const op of acked) {
      if (!effectsPerOp.has(op)) {
        lost++;
        note("lostAcknowledgedWrites", op);
      }
    }

    let callsLeftPending = 0;
    let orphans = 0;
    let unsafeRetried = 0;
    let indeterminate = 0;
    let keyMismatches = 0;
    let misfiled = 0;
    let sandboxUnsafeJournaled = 0;
    for (const c of calls) {
      const id = String(c["_id"]);
      const state = completed.has(id) || completedByEntry(c, entryById) ? "completed" : String(c["state"]);
      if (state === "pending") {
        callsLeftPending++;
        note("callsLeftPending", id);
        if (!copies.has(id) && !unsettledSeconds.has(String(c["lb"]))) {
          orphans++;
          note("orphans", `${id} (no pending copy, second not marked unsettled)`);
        }
      }
      if (state === "indeterminate") indeterminate++;
      if (sandboxCallIds.has(id) && c["effect"] === "unsafe") {
        sandboxUnsafeJournaled++;
        note("sandboxUnsafeJournaled", id);
      }
      const tool = String(c["tool_id"]);
      let args: Record<string, unknown> = {};
      try {
        args = JSON.parse(String(c["arguments_json"])) as Record<string, unknown>;
      } catch {
        note("unreadableArguments", id);
      }
      const op = opOf(tool, args);
      if (c["effect"] === "unsafe" && (Number(c["attempt"]) > 1 || (op !== undefined && (effectsPerOp.get(op) ?? 0) > 1))) {
        unsafeRetried++;
        note("unsafeRetried", `${id} attempt ${String(c["attempt"])}`);
      }
      if (tool === CHARGE.id && typeof args["order"] === "string") {
        const key = expectedChargeKey(args["order"]);
        if (c["key"] !== key) {
          keyMismatches++;
          note("keyMismatches", id);
        }
        const entry = entryById.get(`idem:${key}`);
        if (op !== undefined && effectsPerOp.has(op) && !entry) {
          misfiled++;
          note("misfiledEntries", `${op}: no entry idem:${key}`);
        }
      }
    }
    for (const id of copies) {
      if (!callIds.has(id)) {
        orphans++;
        note("orphans", `${id} (pending copy without a call)`);
      }
    }
    return {
      planned: planned.size,
      acknowledged: acked.size,
      completed: done.size,
      journaledCalls: calls.length,
      sweptCalls: [...done].filter((op) => !callIds.has(`c-${op}`)).length,
      entries: entries.length,
      duplicateEffects,
      lostAcknowledgedWrites: lost,
      callsLeftPending,
      orphans,
      unsafeRetried,
      indeterminate,
      keyMismatches,
      misfiledEntries: misfiled,
      sandboxCalls: sandboxCallIds.size,
      shadowAcks: shadowAcked.size,
      replayAcks,
      deniedUnsafe,
      sandboxEffects,
      sandboxUnsafeJournaled,
      lostShadowWrites,
      workerErrors,
      examples,
    };
  } finally {
    await client.close();
  }
}

/** The op an effect's payload names (the worker writes `{"op","tool"}`), if it is readable. */
function payloadOp(en: Document): string | undefined {
  const raw = en["payload"] as { buffer?: Uint8Array } | Uint8Array;
  const bytes = raw instanceof Uint8Array ? raw : (raw.buffer ?? new Uint8Array());
  try {
    const op = (JSON.parse(Buffer.from(bytes).toString("utf8")) as { op?: unknown }).op;
    return typeof op === "string" ? op : undefined;
  } catch {
    return undefined;
  }
}
