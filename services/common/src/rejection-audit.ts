/**
 * The refusal audit (DESIGN §4, §9): every refused ledger or kernel call is written to the
 * `rejections` collection before the refusal is returned, attributed to a tool id (saying
 * whether that tool id came from a verified capability) and, when known, a principal.
 * Each service opens it under its own name ("ledger", "kernel"), stamped on its records.
 *
 * Unverified callers cannot flood the store: their records are rate-limited per peer IP
 * with a token bucket of `perMinute` records per minute. Past the limit, refusals are
 * counted in memory and written as one summary record per peer per minute
 * (reason RATE_LIMITED_REFUSALS, `count` = how many it stands for), flushed about once a
 * second. The caller is refused either way. Refusals by a verified capability are always
 * recorded individually: they name a real tool and are what an operator acts on.
 *
 * Nothing here ever sees the raw capability.
 */
import { ObjectId, type Collection, type Db, type Filter } from "mongodb";
import { InsertBatcher } from "./insert-batcher";
import { StatsCounters } from "./stats-counters";
import { isDuplicateKey } from "./mongo";
import { createListingIndex, listingBucketOf, listNewestFirst, ListingMarks, scopesOf, sweepBucketsBefore, type Scope } from "./bucketed-listing";
import { cutoff, deleteBatch, type RetentionTask } from "./retention-sweeper";
import type { Logger } from "./logger";
import type { Metrics } from "./metrics";

/** Reason of a summary record standing for rate-limited unauthenticated refusals. */
export const RATE_LIMITED_REFUSALS = "RATE_LIMITED_REFUSALS";

/** Reason of a summary record counting calls refused because keycap itself was unavailable. */
export const UNAVAILABLE_REFUSALS = "UNAVAILABLE_REFUSALS";

/**
 * Refusals caused by keycap's own unavailability, not by the caller: counted per peer and
 * minute into one UNAVAILABLE_REFUSALS summary, never stored one by one as if the tool
 * had misbehaved (an outage would otherwise bury the real refusals).
 */
const AVAILABILITY_REASONS: ReadonlySet<string> = new Set(["SIGNING_KEYS_UNAVAILABLE", "LEDGER_UNAVAILABLE", "DATABASE_UNAVAILABLE"]);

// Longest string copied from a request into a record: a hostile caller controls these.
const MAX_FIELD = 256;

/** What is known about a refused call. Strings default to "". */
export interface RejectionInput {
  method: string;
  reason: string;
  /** gRPC code name, e.g. PERMISSION_DENIED. */
  code: string;
  toolId?: string;
  toolIdVerified: boolean;
  /**
   * Whether the caller was authenticated (a verified capability or principal): those
   * refusals are always stored one by one. Default: toolIdVerified.
   */
  authenticated?: boolean;
  attemptedKey?: string;
  capabilityKey?: string;
  attemptedRequestId?: string;
  capabilityRequestId?: string;
  callId?: string;
  capabilityId?: string;
  keyId?: string;
  /** Effect claimed by the capability ("idempotent", ...) or "". */
  effect?: string;
  /** The caller's address as gRPC reports it ("ip:port"). */
  peer: string;
  message: string;
  /** The principal: the kernel's authenticated caller, or the verified capability's `sub`. */
  principal?: string;
}

/** One record, as stored. */
export interface RejectionDoc {
  /** Time-ordered hex id for individual records; `["rl",service,ip,minute]` (JSON) for summaries. */
  _id: string;
  tool_id: string;
  tool_id_verified: boolean;
  reason: string;
  code: string;
  method: string;
  attempted_key: string;
  capability_key: string;
  attempted_request_id: string;
  capability_request_id: string;
  call_id: string;
  capability_id: string;
  key_id: string;
  effect: string;
  peer: string;
  message: string;
  rejected_at: Date;
  /** The second of `rejected_at` its listings read it by (ADR 0033); absent on records from before. */
  lb?: string;
  count: number;
  /** Which service refused: "ledger" or "kernel"; absent on records from before kernel refusals were stored (ledger). */
  service?: string | null;
  /** The principal, when known (kernel: the authenticated caller; ledger: the capability's sub). */
  principal?: string;
  /** Summaries only: the last refusal counted, and counts by underlying reason. */
  last_rejected_at?: Date;
  reasons?: Record<string, number>;
}

/** Filters of ListRejections. */
export interface RejectionQuery {
  /** "" for every service. */
  service?: string;
  toolId: string;
  reason: string;
  since: Date | undefined;
  until: Date | undefined;
  /** Only refusals naming this call id; "" or absent for all. */
  callId?: string;
}

/** Keyset cursor: the last record of the previous page. */
export interface RejectionCursor {
  rejectedAt: Date;
  id: string;
}

export interface RejectionAuditOptions {
  /** The service whose refusals these are ("ledger", "kernel"). Default "ledger". */
  service?: string;
  /** Individual unauthenticated records per peer IP per minute. */
  unauthenticatedPerMinute: number;
  logger: Logger;
  /** How often summaries are written, in milliseconds. Default 1000. */
  flushIntervalMs?: number;
  /** Clock, in milliseconds since the epoch. Default `Date.now`. */
  now?: () => number;
  /** Counts every refusal by service, reason and tool (rate-limited ones too). */
  metrics?: Metrics | undefined;
}

interface PendingSummary {
  kind: "rate-limited" | "unavailable";
  ip: string;
  minute: number;
  first: number;
  last: number;
  count: number;
  reasons: Record<string, number>;
}

/**
 * Records refusals; also the read side (listing and totals) for the admin API.
 */
export class RejectionAudit {
  private readonly limiter: PeerRateLimiter;
  private pending = new Map<string, PendingSummary>();
  private readonly timer: NodeJS.Timeout;
  private flushing: Promise<void> | undefined;
  private readonly now: () => number;
  private readonly logger: Logger;
  private readonly service: string;
  /** Concurrent refusals share an insert command (group commit, ADR 0020): a flood of abuse costs the database less per refusal. */
  private readonly inserts: InsertBatcher<RejectionDoc>;
  /** Refusals counted as they are recorded, by reason and tool (GetStats reads these, never the collection). */
  readonly counters: StatsCounters;
  /** No record without `lb` is past its retention any more (see expire). */
  private unbucketedGone = false;

  private constructor(
    private readonly coll: Collection<RejectionDoc>,
    private readonly opts: RejectionAuditOptions,
    db: Db,
    private readonly marks: ListingMarks,
  ) {
    this.now = opts.now ?? Date.now;
    this.logger = opts.logger;
    this.service = opts.service ?? "ledger";
    this.counters = StatsCounters.open(db, { kind: "refusals", service: this.service, logger: opts.logger });
    this.inserts = new InsertBatcher(coll, {
      writeConcern: { w: "majority" },
      sizeOf: (d) => 2048 + 3 * d.message.length,
      unacknowledged: () => new Error("rejections insert was not acknowledged"),
    });
    this.limiter = new PeerRateLimiter(opts.unauthenticatedPerMinute, this.now);
    this.timer = setInterval(() => void this.flush(), opts.flushIntervalMs ?? 1000);
    this.timer.unref();
  }

  /** Opens the collection and creates its indexes; a failure stops the start. */
  static async open(db: Db, opts: RejectionAuditOptions): Promise<RejectionAudit> {
    const coll = db.collection<RejectionDoc>("rejections");
    // One index per command (see EntryStore.open).
    // Retention's oldest-first reads (ADR 0031).
    await coll.createIndex({ rejected_at: -1, _id: -1 }, { name: "newest_first" });
    // Listings by time bucket (ADR 0033), and a call's story: every refusal naming a call (ADR 0032).
    await createListingIndex(coll);
    await coll.createIndex({ call_id: 1 }, { name: "eq_call_id" });
    return new RejectionAudit(coll, opts, db, await ListingMarks.open(db));
  }

  /**
   * Records one refusal. Never throws: if the record cannot be written the failure is
   * logged and the caller refuses anyway.
   */
  async record(input: RejectionInput): Promise<void> {
    this.opts.metrics?.refusal(this.service, input.reason, input.toolId ?? "");
    const peerIp = ipOfPeer(input.peer);
    if (AVAILABILITY_REASONS.has(input.reason)) {
      this.accumulate("unavailable", peerIp, input.reason);
      return;
    }
    if (!(input.authenticated ?? input.toolIdVerified) && !this.limiter.take(peerIp)) {
      this.accumulate("rate-limited", peerIp, input.reason);
      return;
    }
    const doc: RejectionDoc = {
      _id: new ObjectId().toHexString(),
      service: this.service,
      principal: clip(input.principal),
      tool_id: clip(input.toolId),
      tool_id_verified: input.toolIdVerified,
      reason: input.reason,
      code: input.code,
      method: input.method,
      attempted_key: clip(input.attemptedKey),
      capability_key: clip(input.capabilityKey),
      attempted_request_id: clip(input.attemptedRequestId),
      capability_request_id: clip(input.capabilityRequestId),
      call_id: clip(input.callId),
      capability_id: clip(input.capabilityId),
      key_id: clip(input.keyId),
      effect: clip(input.effect),
      peer: clip(input.peer),
      message: clip(input.message, 1024),
      rejected_at: new Date(this.now()),
      count: 1,
    };
    doc.lb = listingBucketOf(doc.rejected_at);
    try {
      await this.marks.ensure("rejections", doc.rejected_at, rejectionScopes(doc));
      await this.inserts.insert(doc);
      this.counters.addRefusals(doc.reason, doc.tool_id);
    } catch (err) {
      this.logger.error({ err, reason: input.reason, tool_id: doc.tool_id, peer: doc.peer }, "could not record a refusal; refusing anyway");
    }
  }

  /** Writes the pending summaries now (also runs on a timer). */
  flush(): Promise<void> {
    // One flush at a time, so two cannot write the same pending counts twice.
    this.flushing ??= this.writeSummaries().finally(() => {
      this.flushing = undefined;
    });
    return this.flushing;
  }

  /** Stops the timer and writes what is pending. */
  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.flushing;
    await this.flush();
    await this.counters.close();
  }

  /**
   * Newest first, read by time bucket (ADR 0033) in the most selective listing the filters name
   * (tool, then reason, then service); a call's refusals by its `eq_call_id` index. `maxTimeMS`
   * bounds the whole page.
   */
  async list(q: RejectionQuery, cursor: RejectionCursor | undefined, limit: number, maxTimeMS: number): Promise<RejectionDoc[]> {
    const filter: Filter<RejectionDoc> = {};
    if (q.service) filter.service = q.service;
    if (q.toolId !== "") filter.tool_id = q.toolId;
    if (q.reason !== "") filter.reason = q.reason;
    const after = cursor ? { at: cursor.rejectedAt, id: cursor.id } : undefined;
    const page = { timeField: "rejected_at" as const, filter, after, since: q.since, until: q.until, limit, maxTimeMS };
    if (q.callId) return this.listOneCall(q.callId, page);
    const scope: Scope = q.toolId
      ? { scope: "tool", value: q.toolId }
      : q.reason
        ? { scope: "reason", value: q.reason }
        : q.service
          ? { scope: "service", value: q.service }
          : { scope: "all", value: "" };
    return listNewestFirst(this.marks, this.coll, { name: "rejections", scope, ...page });
  }

  /** The refusals naming one call (a handful): one equality read, ordered here. */
  private async listOneCall(callId: string, page: Omit<Parameters<typeof listNewestFirst<RejectionDoc>>[2], "name" | "scope">): Promise<RejectionDoc[]> {
    const docs = await this.coll.find({ ...page.filter, call_id: callId }, { maxTimeMS: page.maxTimeMS }).toArray();
    const t = (d: RejectionDoc) => d.rejected_at.getTime();
    return docs
      .filter((d) => (!page.since || t(d) >= page.since.getTime()) && (!page.until || t(d) < page.until.getTime()))
      .filter((d) => !page.after || t(d) < page.after.at.getTime() || (t(d) === page.after.at.getTime() && d._id < page.after.id))
      .sort((a, b) => t(b) - t(a) || (a._id < b._id ? 1 : -1))
      .slice(0, page.limit);
  }

  /**
   * Retention (ADR 0031): removes about `limit` records refused before `before`, second by
   * second through the listing marks (ADR 0033: equality reads, never a scan); records from
   * before `lb` existed by their time, until none is left (that read scans on FerretDB, so
   * it runs only while such records remain, once per process when there are none). The refusal
   * counters are not touched: they count what was refused.
   */
  async expire(before: Date, limit: number): Promise<number> {
    const removed = await sweepBucketsBefore(this.marks, this.coll, {
      name: "rejections",
      before,
      limit,
      scopes: rejectionScopes,
      fields: ["tool_id", "reason", "service"],
    });
    if (removed >= limit || this.unbucketedGone) return removed;
    const legacy = await deleteBatch(this.coll, { lb: { $exists: false }, rejected_at: { $lt: before } }, limit - removed);
    if (legacy === 0) this.unbucketedGone = true;
    return removed + legacy;
  }

  /** The retention task of refusal records: every service that records refusals may run it, under one lease. */
  retentionTask(seconds: number): RetentionTask {
    return { name: "rejections", sweep: (limit) => this.expire(cutoff(seconds) as Date, limit) };
  }

  private accumulate(kind: PendingSummary["kind"], ip: string, reason: string): void {
    const t = this.now();
    const minute = Math.floor(t / 60_000);
    const id = JSON.stringify([kind, ip, minute]);
    let p = this.pending.get(id);
    if (!p) {
      p = { kind, ip, minute, first: t, last: t, count: 0, reasons: {} };
      this.pending.set(id, p);
    }
    p.count += 1;
    p.last = t;
    p.reasons[reason] = (p.reasons[reason] ?? 0) + 1;
  }

  private async writeSummaries(): Promise<void> {
    this.limiter.prune();
    if (this.pending.size === 0) return;
    const batch = [...this.pending.values()];
    this.pending = new Map();
    for (const p of batch) {
      try {
        await this.upsertSummary(p);
        this.counters.addRefusals(p.kind === "unavailable" ? UNAVAILABLE_REFUSALS : RATE_LIMITED_REFUSALS, "", p.count);
      } catch (err) {
        this.logger.error({ err, peer: p.ip, count: p.count }, "could not record a summary of rate-limited refusals");
      }
    }
  }

  /**
   * One summary document per peer IP and minute; replicas add to the same one. A race
   * between two replicas' first upserts surfaces as 11000 and is retried as an update.
   */
  private async upsertSummary(p: PendingSummary): Promise<void> {
    // JSON keeps the parts apart whatever they contain (an IPv6 peer has colons).
    const unavailable = p.kind === "unavailable";
    const id = JSON.stringify([unavailable ? "ua" : "rl", this.service, p.ip, new Date(p.minute * 60_000).toISOString()]);
    const inc: Record<string, number> = { count: p.count };
    for (const [reason, n] of Object.entries(p.reasons)) inc[`reasons.${reason}`] = n;
    const limit = this.opts.unauthenticatedPerMinute;
    const onInsert: Omit<RejectionDoc, "_id" | "count" | "reasons" | "last_rejected_at"> = {
      service: this.service,
      principal: "",
      tool_id: "",
      tool_id_verified: false,
      reason: unavailable ? UNAVAILABLE_REFUSALS : RATE_LIMITED_REFUSALS,
      code: unavailable ? "UNAVAILABLE" : "UNAUTHENTICATED",
      method: "",
      attempted_key: "",
      capability_key: "",
      attempted_request_id: "",
      capability_request_id: "",
      call_id: "",
      capability_id: "",
      key_id: "",
      effect: "",
      peer: clip(p.ip),
      message: unavailable
        ? `calls from ${clip(p.ip, 64)} refused because keycap could not serve them (count = how many; reasons in the record); not the caller's fault`
        : `unauthenticated refusals from ${clip(p.ip, 64)} beyond ${limit} per minute, summarised (count = how many; reasons in the record)`,
      rejected_at: new Date(p.first),
      lb: listingBucketOf(new Date(p.first)),
    };
    await this.marks.ensure("rejections", onInsert.rejected_at, rejectionScopes(onInsert));
    const update = { $inc: inc, $setOnInsert: onInsert, $max: { last_rejected_at: new Date(p.last) } };
    try {
      await this.coll.updateOne({ _id: id }, update, { upsert: true });
    } catch (err) {
      if (!isDuplicateKey(err)) throw err;
      await this.coll.updateOne({ _id: id }, update, { upsert: true });
    }
  }
}

/**
 * Token bucket per peer IP: `perMinute` tokens, refilled continuously. Buckets that are
 * full again are dropped by {@link prune}, so memory follows the recent set of peers.
 */
export class PeerRateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private readonly perMs: number;

  constructor(
    private readonly perMinute: number,
    private readonly now: () => number = Date.now,
  ) {
    this.perMs = perMinute / 60_000;
  }

  /** Takes one token for `ip`; false when its bucket is empty. */
  take(ip: string): boolean {
    const t = this.now();
    const b = this.buckets.get(ip);
    const tokens = b ? Math.min(this.perMinute, b.tokens + (t - b.at) * this.perMs) : this.perMinute;
    if (tokens < 1) {
      this.buckets.set(ip, { tokens, at: t });
      return false;
    }
    this.buckets.set(ip, { tokens: tokens - 1, at: t });
    return true;
  }

  /** Forgets peers whose bucket has refilled completely. */
  prune(): void {
    const t = this.now();
    for (const [ip, b] of this.buckets) {
      if (b.tokens + (t - b.at) * this.perMs >= this.perMinute) this.buckets.delete(ip);
    }
  }
}

/**
 * The IP part of a grpc-js peer string ("127.0.0.1:5000", "::1:5000", "[::1]:5000",
 * "ipv4:127.0.0.1:5000"). Unknown shapes are returned whole.
 */
export function ipOfPeer(peer: string): string {
  let p = peer.replace(/^ipv[46]:/, "");
  const bracket = /^\[([^\]]+)\](?::\d+)?$/.exec(p);
  if (bracket) return bracket[1] as string;
  const portAt = p.lastIndexOf(":");
  if (portAt > 0 && /^\d+$/.test(p.slice(portAt + 1))) p = p.slice(0, portAt);
  return p === "" ? "unknown" : p;
}

function clip(v: string | undefined, max = MAX_FIELD): string {
  if (v === undefined) return "";
  return v.length > max ? `${v.slice(0, max)}…` : v;
}

/** The listings a refusal appears in (ADR 0033): all, its tool, its reason, its service. */
function rejectionScopes(d: Pick<RejectionDoc, "tool_id" | "reason" | "service">): Scope[] {
  return scopesOf({ tool: d.tool_id, reason: d.reason, service: d.service ?? "" });
}
