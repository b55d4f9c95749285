/**
 * A burst of concurrent calls is sent as several batches side by side, not one the next burst
 * waits behind: at c=64 the whole call's 64 clients moved in lockstep between the kernel and
 * the ledger (each busy a third of the time) while one BeginCalls of 64 and one journal insert
 * of 64 were out (bench/README, "What limits the two-write call").
 */
import { expect } from "chai";
import type { Collection, Document } from "mongodb";
import { CallCoalescer, type BatchAnswer } from "../../clients/ts/src/call-coalescer";
import { TurnBatches } from "../../clients/ts/src/turn-batches";
import { InsertBatcher } from "../../services/common/src/insert-batcher";
import { JOURNAL_BATCHES } from "../../services/kernel/src/call-journal";

/** A promise with its resolve, to hold a batch out until the test lets it go. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}

const turn = (): Promise<void> => new Promise((r) => setImmediate(r));

describe("batches in flight", () => {
  it("TurnBatches keeps at most inFlight batches out, and sends what waited when one settles", async () => {
    const sent: number[][] = [];
    const gates: Array<() => void> = [];
    const batches = new TurnBatches<number>(
      (q) => q.splice(0, 3),
      async (b) => {
        sent.push(b);
        const g = gate();
        gates.push(g.open);
        await g.wait;
      },
      2,
    );
    for (let i = 0; i < 8; i++) batches.push(i);
    await turn();
    await turn();
    expect(sent).to.deep.equal([
      [0, 1, 2],
      [3, 4, 5],
    ]);
    gates[1]!();
    await turn();
    await turn();
    expect(sent).to.deep.equal([
      [0, 1, 2],
      [3, 4, 5],
      [6, 7],
    ]);
    gates[0]!();
    gates[2]!();
  });

  it("TurnBatches defaults to one batch out", async () => {
    const sent: number[][] = [];
    const g = gate();
    const batches = new TurnBatches<number>(
      (q) => q.splice(0, 3),
      async (b) => {
        sent.push(b);
        await g.wait;
      },
    );
    for (let i = 0; i < 6; i++) batches.push(i);
    await turn();
    await turn();
    expect(sent).to.deep.equal([[0, 1, 2]]);
    g.open();
    await turn();
    await turn();
    expect(sent).to.have.length(2);
  });

  it("the kernel client's coalescer sends 64 concurrent calls as two batches of 32, both out at once", async () => {
    const out: number[] = [];
    let most = 0;
    const release = gate();
    const coalescer = new CallCoalescer<number, number>(
      async (n) => n,
      async (items): Promise<BatchAnswer<number>[]> => {
        out.push(items.length);
        most = Math.max(most, out.length);
        await release.wait;
        return items.map((n) => ({ ok: true, value: n * 2 }));
      },
      { maxBatch: 32, inFlight: 2 },
    );
    const answers = Promise.all(Array.from({ length: 64 }, (_, i) => coalescer.submit(i)));
    await turn();
    await turn();
    expect(out).to.deep.equal([32, 32]);
    expect(most).to.equal(2);
    release.open();
    expect(await answers).to.deep.equal(Array.from({ length: 64 }, (_, i) => i * 2));
  });

  it("the journal's insert batcher writes a burst of 64 as two commands of 32, side by side", async () => {
    const commands: number[] = [];
    const release = gate();
    const coll = {
      collectionName: "calls",
      db: {
        command: async (cmd: { documents: Document[] }) => {
          commands.push(cmd.documents.length);
          await release.wait;
          return { ok: 1, n: cmd.documents.length };
        },
      },
    } as unknown as Collection<{ _id: string }>;
    const batcher = new InsertBatcher(coll, { writeConcern: { w: "majority" }, unacknowledged: () => new Error("unacknowledged"), ...JOURNAL_BATCHES });
    const done = Promise.all(Array.from({ length: 64 }, (_, i) => batcher.insert({ _id: `c${i}` })));
    await turn();
    await turn();
    expect(commands).to.deep.equal([32, 32]);
    release.open();
    await done;
  });
});
