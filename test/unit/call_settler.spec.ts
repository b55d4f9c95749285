/**
 * The settler of begun calls (ADR 0034), on a store that records what it is asked: a call the
 * ledger's entry completes gets a completion and never a copy; a call still open after the
 * settle time gets a pending copy; a call completed here gets neither; a second is unmarked
 * only once all its calls are settled, and never while a BeginCall of it is in flight.
 */
import { expect } from "chai";
import { CallSettler, type EntryRef, type SettleStore } from "../../services/kernel/src/call-settler";
import type { CallRecord } from "../../services/kernel/src/call-journal";
import { secondBucket } from "../../services/common/src/domain/time-buckets";
import { idempotentEffectId } from "../../services/common/src/domain/call-completion";
import type { Logger } from "../../services/common/src/logger";
import { issueReceipt } from "../../services/common/src/domain/completion-receipt";

const T0 = Date.UTC(2026, 11, 6, 12, 0, 0);
const silentLogger: Logger = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {}, child: () => silentLogger };

function call(id: string, atMs: number, opts: Partial<CallRecord> = {}): CallRecord {
  const at = new Date(atMs);
  return {
    _id: id,
    tool_id: "t.charge",
    run_id: "",
    arguments_json: "{}",
    effect: "idempotent",
    key: `k-${id}`,
    attempt: 1,
    state: "pending",
    capability: {} as CallRecord["capability"],
    created_at: at,
    updated_at: at,
    lb: secondBucket(at),
    ...opts,
  };
}

class RecordingStore implements SettleStore {
  marks = new Set<string>();
  entries = new Map<string, EntryRef[]>();
  completed: string[] = [];
  copied: string[] = [];
  adopted: string[] = [];
  stale: Array<{ id: string; second: string }> = [];
  entriesReads: string[] = [];
  lookups: string[] = [];
  completingEntry(c: CallRecord): Promise<EntryRef | undefined> {
    this.lookups.push(c._id);
    const all = [...this.entries.values()].flat();
    return Promise.resolve(all.find((e) => e._id === idempotentEffectId(c.key!) && e.call_id === c._id));
  }
  openSecond(second: string, generation: number): Promise<void> {
    this.marks.add(`${second}/${generation}`);
    return Promise.resolve();
  }
  closeSecond(second: string, generation: number): Promise<void> {
    this.marks.delete(`${second}/${generation}`);
    return Promise.resolve();
  }
  entriesOf(second: string): Promise<EntryRef[]> {
    this.entriesReads.push(second);
    return Promise.resolve(this.entries.get(second) ?? []);
  }
  completeFromEntries(done: ReadonlyArray<{ call: CallRecord; entry: EntryRef }>): Promise<void> {
    this.completed.push(...done.map((d) => d.call._id));
    return Promise.resolve();
  }
  copyPending(calls: readonly CallRecord[]): Promise<void> {
    this.copied.push(...calls.map((c) => c._id));
    return Promise.resolve();
  }
  staleMarks(): Promise<Array<{ id: string; second: string }>> {
    return Promise.resolve(this.stale);
  }
  settleFromDatabase(second: string, markId: string): Promise<void> {
    this.adopted.push(`${second} ${markId}`);
    return Promise.resolve();
  }
  entry(c: CallRecord, atMs: number, callId = c._id): void {
    const second = secondBucket(new Date(atMs));
    const list = this.entries.get(second) ?? [];
    list.push({ _id: idempotentEffectId(c.key!), call_id: callId, recorded_at: new Date(atMs) });
    this.entries.set(second, list);
  }
}

async function journal(settler: CallSettler, c: CallRecord): Promise<void> {
  const done = await settler.admit(c);
  expect(done, "admitted").to.not.equal(undefined);
  done!(true);
}

describe("call settler (ADR 0034)", () => {
  it("completes a call from the entry the ledger wrote a second later, with no pending copy, and unmarks its second", async () => {
    const store = new RecordingStore();
    const settler = new CallSettler(store, silentLogger, { settleAfterMs: 5_000 });
    const c = call("c1", T0 + 100);
    await journal(settler, c);
    expect([...store.marks]).to.deep.equal([`${c.lb}/0`]);
    store.entry(c, T0 + 1_200);
    await settler.tick(T0 + 3_000);
    expect(store.completed).to.deep.equal(["c1"]);
    await settler.tick(T0 + 7_000);
    expect(store.copied).to.deep.equal([]);
    expect([...store.marks]).to.deep.equal([]);
  });

  it("gives a call still open after the settle time a pending copy; an entry of another call with the same key does not complete it", async () => {
    const store = new RecordingStore();
    const settler = new CallSettler(store, silentLogger, { settleAfterMs: 5_000 });
    const c = call("c2", T0 + 100);
    await journal(settler, c);
    store.entry(c, T0 + 500, "another-call");
    await settler.tick(T0 + 4_000);
    expect(store.copied).to.deep.equal([]);
    expect([...store.marks]).to.have.length(1); // not yet: within the settle time
    await settler.tick(T0 + 6_500);
    expect(store.completed).to.deep.equal([]);
    expect(store.copied).to.deep.equal(["c2"]);
    expect([...store.marks]).to.deep.equal([]);
  });

  it("writes nothing for a call completed here (CompleteCall), and does not unmark a second while a BeginCall of it is in flight", async () => {
    const store = new RecordingStore();
    const settler = new CallSettler(store, silentLogger, { settleAfterMs: 5_000 });
    const a = call("a", T0 + 100);
    await journal(settler, a);
    settler.settled("a");
    const late = await settler.admit(call("late", T0 + 200));
    await settler.tick(T0 + 10_000);
    expect([...store.marks], "in flight: still marked").to.have.length(1);
    late!(true);
    await settler.tick(T0 + 10_500);
    expect(store.completed).to.deep.equal([]);
    expect(store.copied).to.deep.equal(["late"]);
    expect([...store.marks]).to.deep.equal([]);
  });

  it("with many calls open, reads the entries of each second once (not per call), and none at all while nothing is open", async () => {
    const store = new RecordingStore();
    const settler = new CallSettler(store, silentLogger, { settleAfterMs: 5_000 });
    await settler.tick(T0 + 5_000);
    expect(store.entriesReads).to.deep.equal([]);
    for (let i = 0; i < 20; i++) await journal(settler, call(`r${i}`, T0 + 100));
    await settler.tick(T0 + 2_500);
    await settler.tick(T0 + 2_700);
    await settler.tick(T0 + 3_500);
    expect(store.entriesReads).to.deep.equal([
      secondBucket(new Date(T0 - 1_000)),
      secondBucket(new Date(T0)),
      secondBucket(new Date(T0 + 1_000)),
      secondBucket(new Date(T0 + 2_000)),
    ]);
    expect(store.lookups).to.deep.equal([]);
  });

  it("with few calls open, looks each one up by its entry instead of reading whole seconds", async () => {
    const store = new RecordingStore();
    const settler = new CallSettler(store, silentLogger, { settleAfterMs: 5_000 });
    const c = call("few", T0 + 100);
    await journal(settler, c);
    store.entry(c, T0 + 300);
    await settler.tick(T0 + 2_500);
    expect(store.entriesReads).to.deep.equal([]);
    expect(store.lookups).to.deep.equal(["few"]);
    expect(store.completed).to.deep.equal(["few"]);
  });

  describe("with the ledger's receipts (ADR 0035)", () => {
    const secret = Buffer.alloc(32, 7);
    const receiptOf = (c: CallRecord, atMs: number, key = secret): ReturnType<typeof issueReceipt> =>
      issueReceipt(key, c.key!, { callId: c._id, recordedAtMs: atMs });

    it("settles receipted calls from their receipts and reads no entries at all", async () => {
      const store = new RecordingStore();
      const settler = new CallSettler(store, silentLogger, { settleAfterMs: 5_000 });
      const calls = Array.from({ length: 20 }, (_, i) => call(`rc${i}`, T0 + 100 + i));
      for (const c of calls) await journal(settler, c);
      for (const c of calls) expect(settler.receipt(receiptOf(c, T0 + 400), secret)).to.equal("settles");
      for (const t of [2_500, 3_500, 7_000]) await settler.tick(T0 + t);
      expect(store.entriesReads).to.deep.equal([]);
      expect(store.lookups).to.deep.equal([]);
      expect(store.completed).to.deep.equal(calls.map((c) => c._id));
      expect(store.copied).to.deep.equal([]);
      expect([...store.marks]).to.deep.equal([]);
      expect(settler.openCalls).to.equal(0);
    });

    it("ignores a receipt under another key, for another call's entry, or for a call not open here; those calls are read as before", async () => {
      const store = new RecordingStore();
      const settler = new CallSettler(store, silentLogger, { settleAfterMs: 5_000 });
      const calls = Array.from({ length: 20 }, (_, i) => call(`rf${i}`, T0 + 100 + i));
      for (const c of calls) await journal(settler, c);
      const [forged, swapped, ...rest] = calls;
      expect(settler.receipt(receiptOf(forged!, T0 + 400, Buffer.alloc(32, 8)), secret)).to.equal("invalid");
      // A receipt of one call's entry presented for another call.
      expect(settler.receipt({ ...receiptOf(rest[0]!, T0 + 400), callId: swapped!._id }, secret)).to.equal("invalid");
      expect(settler.receipt(receiptOf(call("elsewhere", T0 + 100), T0 + 400), secret)).to.equal("unknown");
      for (const c of rest) settler.receipt(receiptOf(c, T0 + 400), secret);
      // Neither has an entry: read, not found, and given a pending copy when due.
      await settler.tick(T0 + 2_500);
      expect(store.lookups).to.deep.equal([forged!._id, swapped!._id]);
      await settler.tick(T0 + 6_500);
      expect(store.copied).to.deep.equal([forged!._id, swapped!._id]);
      expect(store.completed).to.have.members(rest.map((c) => c._id));
    });

    it("waits for a young call's receipt instead of reading its second, and reads it once the receipt is overdue", async () => {
      const store = new RecordingStore();
      const settler = new CallSettler(store, silentLogger, { settleAfterMs: 5_000 });
      const old = Array.from({ length: 10 }, (_, i) => call(`ro${i}`, T0 + 100 + i));
      for (const c of old) await journal(settler, c);
      for (const c of old) settler.receipt(receiptOf(c, T0 + 300), secret);
      // Calls in flight at the next tick (begun 200 ms before it): no read for them yet.
      const young = Array.from({ length: 10 }, (_, i) => call(`ry${i}`, T0 + 2_300 + i));
      for (const c of young) await journal(settler, c);
      await settler.tick(T0 + 2_500);
      expect(store.entriesReads).to.deep.equal([]);
      // No receipt ever comes for the young ones (a client's last calls): their entries are read.
      for (const c of young) store.entry(c, T0 + 2_400);
      await settler.tick(T0 + 4_000);
      expect(store.entriesReads).to.deep.equal([secondBucket(new Date(T0 + 1_000)), secondBucket(new Date(T0 + 2_000))]);
      expect(store.completed).to.have.members([...old, ...young].map((c) => c._id));
      expect(store.copied).to.deep.equal([]);
    });
  });

  it("refuses to hold more open calls than its bound (the caller journals the old way)", async () => {
    const store = new RecordingStore();
    const settler = new CallSettler(store, silentLogger, { maxCalls: 1 });
    await journal(settler, call("one", T0));
    expect(await settler.admit(call("two", T0))).to.equal(undefined);
  });

  it("settles the seconds other replicas left marked (killed) from the database", async () => {
    const store = new RecordingStore();
    store.stale = [{ id: "dead/20261206115900/0", second: "20261206115900" }];
    const settler = new CallSettler(store, silentLogger);
    await settler.tick(T0);
    expect(store.adopted).to.deep.equal(["20261206115900 dead/20261206115900/0"]);
  });
});
