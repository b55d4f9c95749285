/**
 * The journal document's form (ADR 0036): the capability's claims are one JSON string, since
 * FerretDB converts each value of a document on every insert and no read filters on a claim.
 * A call journaled before keeps its claims object and is read, resumed and listed the same; a
 * resume rewrites it in the new form.
 */
import { expect } from "chai";
import { MongoClient, type Db } from "mongodb";
import { createLogger } from "../services/common/src/logger";
import { CallJournal, type CallRecord } from "../services/kernel/src/call-journal";
import { journaledCall } from "./support/journaled-call";
import { freshDatabaseName, testMongoUri } from "./support/mongo";

function call(id: string): CallRecord {
  const c = journaledCall(id, { toolId: "doc.tool", runId: "run-doc" });
  return { ...c, capability: { ...c.capability, derivation: { version: 1, fields: ["/order"], context: {} } } };
}

describe("call journal: the stored document", () => {
  let client: MongoClient;
  let db: Db;
  let journal: CallJournal;

  before(async () => {
    client = await MongoClient.connect(testMongoUri(), { serverSelectionTimeoutMS: 10_000 });
  });
  after(async () => client?.close());
  beforeEach(async () => {
    db = client.db(freshDatabaseName("jdoc"));
    journal = await CallJournal.open(db, createLogger("test", "warn"));
  });
  afterEach(async () => journal?.close());

  it("stores the capability's claims as one JSON string and reads them back whole", async () => {
    const c = call("doc-1");
    await journal.begin(structuredClone(c));
    const raw = await db.collection("calls").findOne({ _id: "doc-1" } as never);
    expect(raw, "journal document").to.not.equal(null);
    expect(raw!["capability"], "no claims object").to.equal(undefined);
    expect(raw!["capability_json"]).to.be.a("string");
    expect(JSON.parse(String(raw!["capability_json"]))).to.deep.equal(c.capability);
    // The fields reads filter on stay top-level.
    for (const field of ["_id", "tool_id", "run_id", "key", "state", "principal", "lb"]) expect(raw, field).to.have.property(field);
    expect((await journal.get("doc-1"))?.capability).to.deep.equal(c.capability);
    expect((await journal.listRun("run-doc", 0, 10)).map((r) => r.capability)).to.deep.equal([c.capability]);
  });

  it("reads and resumes a call journaled with a claims object, and rewrites it as a string", async () => {
    const old = call("doc-old");
    await db.collection<CallRecord>("calls").insertOne(old);
    const read = await journal.get("doc-old");
    expect(read?.capability).to.deep.equal(old.capability);
    const next = { ...old.capability, attempt: 2, jti: "jti-doc-old-2" };
    const advanced = await journal.advanceAttempt(read!, next, "rt");
    expect(advanced.capability).to.deep.equal(next);
    const raw = await db.collection("calls").findOne({ _id: "doc-old" } as never);
    expect(raw!["capability"], "old claims object removed").to.equal(undefined);
    expect(JSON.parse(String(raw!["capability_json"]))).to.deep.equal(next);
    expect((await journal.get("doc-old"))?.capability).to.deep.equal(next);
  });

  it("refuses to read stored claims that are not JSON, naming the call", async () => {
    const bad = call("doc-bad");
    const { capability: _claims, ...rest } = bad;
    await db.collection("calls").insertOne({ ...rest, capability_json: '{"iss": "keycap-kernel"' } as never);
    let err: unknown;
    try {
      await journal.get("doc-bad");
    } catch (e) {
      err = e;
    }
    expect(String(err)).to.match(/doc-bad.*not JSON/);
  });
});
