/**
 * `make bench-volume` (issue 32 item 5): the operator paths and the whole call on a database
 * that already holds N effects, N completed calls and N refusals.
 *
 * A real `keycap serve all` (kernel, ledger, admin, console) on the harness's MongoDB-protocol
 * server (FerretDB on PostgreSQL unless KEYCAP_EMBEDDED_MONGO says otherwise). The whole call
 * (BeginCall → Write → CompleteCall, c=16) is measured on the empty database first. Then the
 * preload: a few real calls and refusals go through the services, and their documents
 * (entries, calls, call_completions, rejections) are cloned N times with fresh ids, keys and
 * times: the shapes are exactly what the services write, at a rate the services would need
 * hours for. Then the whole call again, and every operator read a person or a script makes:
 * each admin RPC, `keycap stats`, and the console's overview and refusals pages, each a few
 * times, with p50 / max and whether it answered.
 *
 * Usage: node dist/bench/volume.js [--records N] [--reps R] (default 1,000,000 and 3).
 * The result goes to stdout and bench/results/volume-<time>.json.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as readline from "node:readline";
import { MongoClient, type Db, type Document } from "mongodb";
import { AdminClient, KernelClient, KeycapClientError, LedgerClient } from "../clients/ts/src";
import { startMongoServer } from "../services/common/src/embedded-mongo";
import { createLogger } from "../services/common/src/logger";
import { projectRoot } from "../services/common/src/repo-paths";
import { isDuplicateKey } from "../services/common/src/mongo";
import { marksFor, secondBucket, type Scope } from "../services/common/src/domain/time-buckets";

const ADMIN_TOKEN = `bench-volume-admin-${crypto.randomBytes(12).toString("hex")}`;
const RUNTIME_TOKEN = `keycap_rt_bench_${crypto.randomBytes(18).toString("base64url")}`;
const TOOL = "bench.volume.charge";
const BATCH = 2_000;

interface Args {
  records: number;
  reps: number;
}

function parseArgs(argv: string[]): Args {
  const out: Args = { records: 1_000_000, reps: 3 };
  for (let i = 0; i < argv.length; i++) {
    const v = Number(argv[i + 1]);
    if (argv[i] === "--records" && Number.isSafeInteger(v) && v > 0) out.records = v;
    if (argv[i] === "--reps" && Number.isSafeInteger(v) && v > 0) out.reps = v;
  }
  return out;
}

/** `keycap serve all` as a child process; resolves with its endpoints once ready. */
async function serveAll(env: Record<string, string>): Promise<{ child: ChildProcess; endpoints: Record<string, string> }> {
  const cli = path.join(projectRoot(), "dist/services/cli/src/main.js");
  const child = spawn(process.execPath, [cli, "serve", "all"], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  child.stderr!.resume();
  child.stdout!.on("data", () => undefined);
  return new Promise((resolve, reject) => {
    const lines = readline.createInterface({ input: child.stdout! });
    const timer = setTimeout(() => {
      // Never leave a half-started service behind.
      child.kill("SIGKILL");
      reject(new Error("keycap serve all not ready within 120 s"));
    }, 120_000);
    lines.on("line", (line) => {
      try {
        const rec = JSON.parse(line) as { msg?: string; endpoints?: { listener: string; address: string }[] };
        if (rec.msg !== "ready" || !rec.endpoints) return;
        clearTimeout(timer);
        resolve({ child, endpoints: Object.fromEntries(rec.endpoints.map((e) => [e.listener, e.address])) });
      } catch {
        // not a log line
      }
    });
    child.once("exit", (code) => reject(new Error(`keycap serve all exited with ${code}`)));
  });
}

/** Whole calls at `concurrency` for `seconds`: calls per second. */
async function wholeCalls(kernel: KernelClient, concurrency: number, seconds: number, tag: string): Promise<number> {
  const end = Date.now() + seconds * 1000;
  let done = 0;
  let n = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (Date.now() < end) {
        const call = await kernel.begin(TOOL, { order: `${tag}-${n++}` });
        await call.write("paid");
        await call.complete("succeeded");
        done++;
      }
    }),
  );
  return done / seconds;
}

/**
 * The whole call on two stacks side by side, round after round (A then B, `rounds` times,
 * `seconds` each): the per-round ratios A ÷ B, so both see the same machine state (the
 * database's background work after a preload, other load on the box).
 */
async function sideBySide(
  a: KernelClient,
  b: KernelClient,
  rounds: number,
  seconds: number,
  tag: string,
): Promise<{ a: number[]; b: number[]; ratios: number[] }> {
  const out = { a: [] as number[], b: [] as number[], ratios: [] as number[] };
  for (let r = 0; r < rounds; r++) {
    out.a.push(await wholeCalls(a, 16, seconds, `${tag}-a${r}`));
    out.b.push(await wholeCalls(b, 16, seconds, `${tag}-b${r}`));
    out.ratios.push(Math.round((out.a[r]! / out.b[r]!) * 100) / 100);
  }
  return out;
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((x, y) => x - y);
  const m = s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
  return Math.round(m * 100) / 100;
}

/** How a cloned record is listed (ADR 0033): its time field and the listings it is in. */
interface Listed {
  timeField: string;
  scopes: (d: Document) => Scope[];
}

/**
 * `count` copies of `template` with fresh `_id`s (and whatever `vary` changes), inserted in
 * batches; a listed collection's copies get `lb` and their marks first, as the services write them.
 */
async function clone(db: Db, collection: string, template: Document, count: number, vary: (d: Document, i: number) => void, listed?: Listed): Promise<void> {
  const coll = db.collection(collection);
  const marked = new Set<string>();
  for (let i = 0; i < count; i += BATCH) {
    const marks: Document[] = [];
    const docs = Array.from({ length: Math.min(BATCH, count - i) }, (_, j) => {
      const d: Document = structuredClone(template);
      vary(d, i + j);
      if (listed) {
        const at = d[listed.timeField] as Date;
        d["lb"] = secondBucket(at);
        for (const m of marksFor(collection, at, listed.scopes(d))) {
          if (!marked.has(m._id)) marks.push(m);
          marked.add(m._id);
        }
      }
      return d;
    });
    if (marks.length > 0) await db.collection("listing_marks").insertMany(marks, { ordered: false }).catch(ignoreDuplicates);
    await coll.insertMany(docs, { ordered: false });
  }
}

function ignoreDuplicates(err: unknown): void {
  const writeErrors = (err as { writeErrors?: unknown[] }).writeErrors ?? [];
  if (!isDuplicateKey(err) || !writeErrors.every((e) => isDuplicateKey(e))) throw err;
}

const all: Scope = { scope: "all", value: "" };
const scoped = (scope: string, v: unknown): Scope[] => (typeof v === "string" && v !== "" ? [{ scope, value: v }] : []);

/** Runs the keycap CLI (as an operator would) and resolves when it exits 0. */
function cli(args: string[], env: Record<string, string>): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      [path.join(projectRoot(), "dist", "services", "cli", "src", "main.js"), ...args],
      { env: { ...process.env, ...env }, maxBuffer: 64 * 1024 * 1024 },
      (err, _out, stderr) => {
        if (err) reject(new KeycapClientError(2, "CLI_FAILED", `${args.join(" ")}: ${stderr.split("\n")[0] ?? ""}`, {}));
        else resolve();
      },
    );
  });
}

interface Timing {
  read: string;
  p50Ms: number;
  maxMs: number;
  answered: number;
  of: number;
  error?: string;
}

async function timeRead(read: string, reps: number, fn: () => Promise<unknown>): Promise<Timing> {
  const ms: number[] = [];
  let error: string | undefined;
  for (let r = 0; r < reps; r++) {
    const started = performance.now();
    try {
      await fn();
      ms.push(performance.now() - started);
    } catch (err) {
      const e = KeycapClientError.from(err);
      error = `${e.codeName} ${e.reason} after ${Math.round(performance.now() - started)} ms`;
    }
  }
  ms.sort((a, b) => a - b);
  const round = (v: number | undefined): number => (v === undefined ? Number.NaN : Math.round(v * 10) / 10);
  return { read, p50Ms: round(ms[Math.floor(ms.length / 2)]), maxMs: round(ms[ms.length - 1]), answered: ms.length, of: reps, ...(error ? { error } : {}) };
}

/** Signs in to the console and returns a function that GETs a page with the session. */
async function consoleSession(address: string): Promise<(page: string) => Promise<void>> {
  const res = await fetch(`http://${address}/signin`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", origin: `http://${address}` },
    body: `token=${encodeURIComponent(ADMIN_TOKEN)}`,
    redirect: "manual",
  });
  const cookie = (res.headers.get("set-cookie") ?? "").split(";")[0] ?? "";
  if (!cookie) throw new Error(`console sign-in answered ${res.status} without a session`);
  return async (page) => {
    const r = await fetch(`http://${address}${page}`, { headers: { cookie } });
    const body = await r.text();
    if (r.status !== 200) throw new KeycapClientError(13, `HTTP_${r.status}`, body.slice(0, 200), {});
  };
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const logger = createLogger("bench-volume", "warn");
  const mongo = await startMongoServer({ logger, embedded: (process.env["KEYCAP_EMBEDDED_MONGO"] as "ferretdb-pg" | undefined) ?? "ferretdb-pg" });
  const database = `volume_${Date.now()}`;
  const stackEnv = (db: string): Record<string, string> => ({
    MONGODB_URI: mongo.uri,
    KEYCAP_MONGODB_DATABASE: db,
    KEYCAP_DATA_DIR: fs.mkdtempSync(path.join(os.tmpdir(), "keycap-bench-volume-")),
    KEYCAP_KERNEL_LISTEN: "127.0.0.1:0",
    KEYCAP_LEDGER_LISTEN: "127.0.0.1:0",
    KEYCAP_ADMIN_LISTEN: "127.0.0.1:0",
    KEYCAP_CONSOLE_LISTEN: "127.0.0.1:0",
    KEYCAP_ADMIN_TOKEN: ADMIN_TOKEN,
    KEYCAP_RUNTIME_TOKEN: RUNTIME_TOKEN,
    // info: the "ready" line is what this waits for.
    KEYCAP_LOG_LEVEL: "info",
  });
  const { child, endpoints } = await serveAll(stackEnv(database));
  // The baseline: the same services on an empty database of the same server, measured in turn with the loaded one.
  const empty = await serveAll(stackEnv(`${database}_empty`));
  const emptyKernel = new KernelClient(empty.endpoints["kernel"]!, { ledgerAddress: empty.endpoints["ledger"]!, token: RUNTIME_TOKEN });
  const client = await MongoClient.connect(mongo.uri);
  const db = client.db(database);
  const kernel = new KernelClient(endpoints["kernel"]!, { ledgerAddress: endpoints["ledger"]!, token: RUNTIME_TOKEN });
  const admin = new AdminClient(endpoints["admin"]!, ADMIN_TOKEN);
  const ledger = new LedgerClient(endpoints["ledger"]!);
  const report: Record<string, unknown> = { backend: mongo.backend, records: args.records, reps: args.reps, at: new Date().toISOString() };
  try {
    for (const k of [kernel, emptyKernel]) await k.registerTool({ id: TOOL, effect: { kind: "idempotent", key: { fields: ["/order"] } } });
    // Both empty: how alike the two stacks are before one is loaded.
    const calibration = await sideBySide(kernel, emptyKernel, 2, 10, "calibration");
    process.stdout.write(
      `whole call, both databases empty: ${calibration.a.map(Math.round).join(", ")} vs ${calibration.b.map(Math.round).join(", ")}/s at c=16 (${median(calibration.ratios)}x)\n`,
    );

    // Templates: what the services themselves wrote.
    const begun = await kernel.beginCall(TOOL, JSON.stringify({ order: "template-refusal" }));
    await ledger.writeWithCapability(begun.capability, { key: "not-the-kernels-key" }, { retry: false }).catch(() => undefined);
    const [entry, call, completion, rejection] = await Promise.all(
      ["entries", "calls", "call_completions", "rejections"].map((c) => db.collection(c).findOne({})),
    );
    if (!entry || !call || !completion || !rejection) throw new Error("no template documents: did the warm-up write?");
    const started = Date.now();
    const past = Date.now() - 86_400_000;
    // 1,000 records a second over the preload's span (a busy deployment's rate).
    await clone(
      db,
      "entries",
      entry,
      args.records,
      (d, i) => {
        d["_id"] = `idem:volume-${i}`;
        d["entry_id"] = `volume-entry-${i}`;
        d["key"] = `volume-${i}`;
        d["call_id"] = `volume-call-${i}`;
        d["recorded_at"] = new Date(past + i);
      },
      { timeField: "recorded_at", scopes: (d) => [all, ...scoped("tool", d["tool_id"])] },
    );
    await clone(
      db,
      "calls",
      call,
      args.records,
      (d, i) => {
        d["_id"] = `volume-call-${i}`;
        d["key"] = `volume-${i}`;
        d["created_at"] = new Date(past + i);
        d["updated_at"] = new Date(past + i);
      },
      { timeField: "created_at", scopes: (d) => scoped("principal", d["principal"]) },
    );
    await clone(
      db,
      "call_completions",
      completion,
      args.records,
      (d, i) => {
        d["_id"] = `volume-call-${i}`;
        d["completed_at"] = new Date(past + i + 5);
      },
      { timeField: "completed_at", scopes: () => [all] },
    );
    await clone(
      db,
      "rejections",
      rejection,
      args.records,
      (d, i) => {
        d["_id"] = crypto.randomBytes(12).toString("hex");
        d["rejected_at"] = new Date(past + i);
        d["call_id"] = `volume-call-${i}`;
      },
      { timeField: "rejected_at", scopes: (d) => [all, ...scoped("tool", d["tool_id"]), ...scoped("reason", d["reason"]), ...scoped("service", d["service"])] },
    );
    report["preloadSeconds"] = Math.round((Date.now() - started) / 1000);
    process.stdout.write(`preloaded ${args.records} each of entries, calls, completions, refusals in ${report["preloadSeconds"]} s\n`);

    const loaded = await sideBySide(kernel, emptyKernel, 4, 10, "loaded");
    report["wholeCall"] = {
      calibration,
      loadedPerSecond: loaded.a.map(Math.round),
      emptyPerSecond: loaded.b.map(Math.round),
      ratios: loaded.ratios,
      ratio: median(loaded.ratios),
    };
    process.stdout.write(
      `whole call, loaded vs empty database in turn: ${loaded.a.map(Math.round).join(", ")} vs ${loaded.b.map(Math.round).join(", ")}/s at c=16: ${median(loaded.ratios)}x (rounds ${loaded.ratios.join(", ")})\n`,
    );

    // Signing in probes the admin API with a listing: at volume that alone can fail.
    const signIn = await consoleSession(endpoints["console"]!).catch((err: unknown) => err as Error);
    const page = async (p: string): Promise<void> => {
      if (signIn instanceof Error) throw new KeycapClientError(14, "CONSOLE_SIGN_IN_FAILED", signIn.message, {});
      await signIn(p);
    };
    const operator = new KernelClient(endpoints["kernel"]!, { token: ADMIN_TOKEN });
    const s = { timeoutMs: 30_000, retry: false };
    const reads: Timing[] = [];
    const mid = Math.floor(args.records / 2);
    const principal = String(call["principal"] ?? "");
    const cliEnv = { KEYCAP_ADMIN_TOKEN: ADMIN_TOKEN, KEYCAP_ADMIN_ADDRESS: endpoints["admin"]!, KEYCAP_KERNEL_ADDRESS: endpoints["kernel"]! };
    const secondPage = async <T extends { nextPageToken: string }>(first: () => Promise<T>, next: (token: string) => Promise<T>): Promise<T> =>
      next((await first()).nextPageToken);
    for (const [read, fn] of [
      ["GetStats", () => admin.stats(s)],
      ["GetEntry by key", () => admin.getEntryByKey(`volume-${mid}`, s)],
      ["ListEntries, first page", () => admin.listEntriesPage("", "", 100, s)],
      [
        "ListEntries, first two pages",
        () =>
          secondPage(
            () => admin.listEntriesPage("", "", 100, s),
            (t) => admin.listEntriesPage("", t, 100, s),
          ),
      ],
      ["ListEntries of one tool", () => admin.listEntriesPage(TOOL, "", 100, s)],
      ["ListRejections, first page", () => admin.listRejectionsPage({}, "", 100, s)],
      [
        "ListRejections, first two pages",
        () =>
          secondPage(
            () => admin.listRejectionsPage({}, "", 100, s),
            (t) => admin.listRejectionsPage({}, t, 100, s),
          ),
      ],
      ["ListRejections of one tool", () => admin.listRejectionsPage({ toolId: TOOL }, "", 100, s)],
      ["ListRejections of one reason", () => admin.listRejectionsPage({ reason: String(rejection["reason"]) }, "", 100, s)],
      ["ListRejections of one call", () => admin.listRejectionsPage({ callId: `volume-call-${mid}` }, "", 100, s)],
      ["ListPendingCalls (operator)", () => operator.listPendingCalls("", s)],
      ["ListIndeterminateCalls", () => operator.listIndeterminateCalls("", s)],
      ["GetCall", () => operator.getCall(`volume-call-${mid}`, s)],
      ["SearchCalls by key", () => operator.searchCallsPage({ key: `volume-${mid}` }, "", 100, s)],
      ...(principal ? [["SearchCalls by principal", () => operator.searchCallsPage({ principal }, "", 100, s)] as [string, () => Promise<unknown>]] : []),
      ["keycap stats (CLI process)", () => cli(["stats"], cliEnv)],
      ["keycap rejections (CLI process)", () => cli(["rejections"], cliEnv)],
      ["keycap entries (CLI process)", () => cli(["entries"], cliEnv)],
      ["console overview", () => page("/")],
      ["console refusals", () => page("/rejections")],
      ["console entries", () => page("/entries")],
      ["console calls", () => page("/calls")],
      ["console call", () => page(`/call?id=volume-call-${mid}`)],
      ...(principal
        ? [["console call search (principal)", () => page(`/calls/search?by=principal&q=${encodeURIComponent(principal)}`)] as [string, () => Promise<unknown>]]
        : []),
    ] as [string, () => Promise<unknown>][]) {
      const t = await timeRead(read, args.reps, fn);
      reads.push(t);
      process.stdout.write(
        `${read.padEnd(34)} p50 ${String(t.p50Ms).padStart(8)} ms  max ${String(t.maxMs).padStart(8)} ms  ${t.answered}/${t.of}${t.error ? `  ${t.error}` : ""}\n`,
      );
    }
    operator.close();
    report["reads"] = reads;
    const out = path.join(projectRoot(), "bench", "results", `volume-${new Date().toISOString().replace(/[:.]/g, "")}.json`);
    fs.mkdirSync(path.dirname(out), { recursive: true });
    fs.writeFileSync(out, JSON.stringify(report, null, 2) + "\n");
    process.stdout.write(`written to ${path.relative(projectRoot(), out)}\n`);
  } finally {
    emptyKernel.close();
    empty.child.kill("SIGTERM");
    await new Promise((r) => empty.child.once("exit", r));
    kernel.close();
    admin.close();
    ledger.close();
    await client.close();
    child.kill("SIGTERM");
    await new Promise((r) => child.once("exit", r));
    await mongo.stop();
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`bench-volume: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
