/**
 * The bench's wire tap (bench/wire-tap.ts) is what makes "database round trips per call"
 * and "the baseline is the same insert" measured claims: it must count what a client
 * really sends and tell two inserts apart by any field, type, size or option.
 */
import { expect } from "chai";
import { MongoClient } from "mongodb";
import { sameShape } from "../bench/round-trips";
import { targetOf, viaTap, WireTap } from "../bench/wire-tap";
import { freshDatabaseName, testMongoUri } from "./support/mongo";

describe("bench wire tap", () => {
  let tap: WireTap;
  let client: MongoClient;

  before(async () => {
    tap = await WireTap.start(targetOf(testMongoUri()));
    client = await MongoClient.connect(viaTap(testMongoUri(), tap), { serverSelectionTimeoutMS: 10_000 });
  });

  after(async () => {
    await client?.close();
    await tap?.stop();
  });

  it("counts each command a client sends, by collection, and the bytes sent", async () => {
    const db = client.db(freshDatabaseName("tap"));
    await db.collection("warm").insertOne({ _id: "w" } as never); // connection set-up happens before the count
    tap.reset();
    for (let i = 0; i < 3; i++) await db.collection("a").insertOne({ n: i });
    await db.collection("a").findOne({ n: 1 });
    await db.collection("b").deleteOne({ n: 0 });
    const snap = tap.snapshot();
    const count = (command: string, collection: string): number => snap.commands.find((c) => c.command === command && c.collection === collection)?.count ?? 0;
    expect(count("insert", "a")).to.equal(3);
    expect(count("find", "a")).to.equal(1);
    expect(count("delete", "b")).to.equal(1);
    expect(snap.messages).to.equal(5);
    expect(snap.bytesToServer).to.be.greaterThan(5 * 16);
  });

  it("tells two inserts apart by a field's type, its size, the write concern, and agrees when they match", async () => {
    const db = client.db(freshDatabaseName("tap"));
    const shapeOf = async (doc: Record<string, unknown>, w: 1 | "majority"): Promise<ReturnType<typeof tap.inserts.get>> => {
      await db.collection("entries").insertOne({ ...doc }, { writeConcern: { w } });
      return tap.inserts.get("entries");
    };
    const a = (await shapeOf({ _id: "idem:aaaa", key: "aaaa", attempt: 1 }, "majority"))!;
    const same = (await shapeOf({ _id: "idem:bbbb", key: "bbbb", attempt: 2 }, "majority"))!;
    const longer = (await shapeOf({ _id: "idem:cccc", key: "cccccc", attempt: 1 }, "majority"))!;
    const otherType = (await shapeOf({ _id: "idem:dddd", key: "dddd", attempt: "1" }, "majority"))!;
    const otherConcern = (await shapeOf({ _id: "idem:eeee", key: "eeee", attempt: 1 }, 1))!;
    expect(sameShape(a, same)).to.deep.equal({ same: true, differences: [] });
    expect(sameShape(a, longer).differences.join("; ")).to.match(/field 1: key:string:9 vs key:string:11/);
    expect(sameShape(a, otherType).differences.join("; ")).to.match(/attempt:int:4 vs attempt:string/);
    expect(sameShape(a, otherConcern).differences.join("; ")).to.match(/command options/);
  });
});
