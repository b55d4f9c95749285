/**
 * LedgerAdminService: read-only operator views of entries, refusals and totals, behind
 * the admin credential (a capability is not one).
 */
import { status, type Metadata, type ServerUnaryCall } from "@grpc/grpc-js";
import type {
  GetEntryRequest,
  GetEntryResponse,
  GetStatsResponse,
  LedgerAdminServiceServer,
  ListEntriesRequest,
  ListEntriesResponse,
  ListRejectionsRequest,
  ListRejectionsResponse,
  Rejection,
} from "../../../gen/ts/keycap/ledger/v1/ledger_admin";
import { KeycapError } from "../../common/src/errors";
import { unaryHandler } from "../../common/src/grpc-status";
import type { Logger } from "../../common/src/logger";
import { decodePageToken, encodePageToken, pageSize } from "../../common/src/paging";
import type { AdminCredential } from "../../common/src/admin-credential";
import { idempotentEffectId } from "./domain/write-rule";
import type { EntryStore } from "./entry-store";
import { effectKindOf } from "../../common/src/effect-kind";
import { entryToProto, entryWritesToProto } from "./ledger-proto";
import type { RejectionAudit, RejectionDoc } from "../../common/src/rejection-audit";
import type { StatsTotals } from "../../common/src/stats-counters";
import { Reasons, refuse } from "../../common/src/refuse";

/** What the admin API reads beyond the stores. */
export interface LedgerAdminOptions {
  /** Database-side time limit of every read (KEYCAP_OPERATOR_QUERY_TIMEOUT_MS). */
  queryTimeMs: number;
  /** Every writer's counters summed (stats-counters.ts). */
  readTotals: (maxTimeMS: number) => Promise<StatsTotals>;
}

/** The admin API's behaviour, independent of transport and of authentication. */
export class LedgerAdmin {
  constructor(
    private readonly entries: EntryStore,
    private readonly audit: RejectionAudit,
    private readonly opts: LedgerAdminOptions,
  ) {}

  async listEntries(req: ListEntriesRequest): Promise<ListEntriesResponse> {
    const limit = pageSize(req.pageSize);
    const cursor = decodePageToken(req.pageToken, { t: "time", id: "id" });
    const ms = this.opts.queryTimeMs;
    const docs = await this.entries.list(req.toolId, cursor ? { recordedAt: new Date(cursor.t), id: cursor.id } : undefined, limit + 1, ms);
    const page = docs.slice(0, limit);
    const last = page[page.length - 1];
    const counts = await this.entries.countsFor(page, ms);
    return {
      entries: page.map((d) => entryToProto(d, counts.get(d._id))),
      nextPageToken: docs.length > limit && last ? encodePageToken({ t: last.recorded_at.getTime(), id: last._id }) : "",
    };
  }

  async getEntry(req: GetEntryRequest): Promise<GetEntryResponse> {
    const sel = req.selector;
    if (!sel || sel.value === "") throw refuse(Reasons.SELECTOR_REQUIRED, "one of entry_id or key is required", { field: "selector" });
    const ms = this.opts.queryTimeMs;
    const doc =
      sel.$case === "entryId" ? await this.entries.findByEntryId(sel.value, ms) : await this.entries.findByEffectId(idempotentEffectId(sel.value), ms);
    if (!doc) {
      const field = sel.$case === "entryId" ? "entry_id" : "key";
      throw refuse(Reasons.ENTRY_NOT_FOUND, `no entry with this ${field}`, { field });
    }
    const [counts, mismatching] = await Promise.all([this.entries.countsFor([doc], ms), this.entries.mismatchingWrites(doc._id, ms)]);
    return { entry: entryToProto(doc, counts.get(doc._id)), writes: entryWritesToProto(doc, mismatching) };
  }

  async listRejections(req: ListRejectionsRequest): Promise<ListRejectionsResponse> {
    const limit = pageSize(req.pageSize);
    if (req.since && req.until && req.since.getTime() >= req.until.getTime()) {
      throw refuse(Reasons.INVALID_TIME_RANGE, "since must be before until", { field: "since" });
    }
    const cursor = decodePageToken(req.pageToken, { t: "time", id: "id" });
    const docs = await this.audit.list(
      { service: req.service, toolId: req.toolId, reason: req.reason, since: req.since, until: req.until, callId: req.callId },
      cursor ? { rejectedAt: new Date(cursor.t), id: cursor.id } : undefined,
      limit + 1,
      this.opts.queryTimeMs,
    );
    const page = docs.slice(0, limit);
    const last = page[page.length - 1];
    return {
      rejections: page.map(rejectionToProto),
      nextPageToken: docs.length > limit && last ? encodePageToken({ t: last.rejected_at.getTime(), id: last._id }) : "",
    };
  }

  /**
   * Totals from the counters every writer keeps (never a count over a collection). This
   * replica's own pending counts are written first, so what it just did is included;
   * other replicas' are at most a flush interval (1 s) old.
   */
  async getStats(): Promise<GetStatsResponse> {
    await Promise.all([this.entries.counters.flush(), this.audit.counters.flush()]);
    const t = await this.opts.readTotals(this.opts.queryTimeMs);
    return {
      entries: t.counts.entries,
      duplicates: t.counts.duplicates,
      payloadMismatches: t.counts.payload_mismatches,
      rejections: t.counts.rejections,
      rejectionsByReason: t.byReason,
      rejectionsByTool: t.byTool,
      countedSince: t.countedSince,
    };
  }
}

function rejectionToProto(d: RejectionDoc): Rejection {
  return {
    rejectionId: d._id,
    toolId: d.tool_id,
    toolIdVerified: d.tool_id_verified,
    reason: d.reason,
    code: d.code,
    method: d.method,
    attemptedKey: d.attempted_key,
    capabilityKey: d.capability_key,
    attemptedRequestId: d.attempted_request_id,
    capabilityRequestId: d.capability_request_id,
    callId: d.call_id,
    capabilityId: d.capability_id,
    keyId: d.key_id,
    effectKind: effectKindOf(d.effect),
    peer: d.peer,
    message: d.message,
    rejectedAt: d.rejected_at,
    count: d.count,
    service: d.service ?? "ledger",
    principal: d.principal ?? "",
  };
}

/**
 * The grpc-js implementation: every method first checks the admin credential
 * (UNAUTHENTICATED, ADMIN_CREDENTIAL_MISSING / ADMIN_CREDENTIAL_INVALID).
 */
export function adminServiceImpl(admin: LedgerAdmin, credential: AdminCredential, logger: Logger): LedgerAdminServiceServer {
  const guarded = <Req, Res>(method: string, fn: (req: Req) => Promise<Res>) =>
    unaryHandler(logger, method, async (req: Req, call: ServerUnaryCall<Req, Res>) => {
      authorize(credential, call, method, logger);
      return fn(req);
    });
  return {
    listEntries: guarded("ListEntries", (r: ListEntriesRequest) => admin.listEntries(r)),
    getEntry: guarded("GetEntry", (r: GetEntryRequest) => admin.getEntry(r)),
    listRejections: guarded("ListRejections", (r: ListRejectionsRequest) => admin.listRejections(r)),
    getStats: guarded("GetStats", () => admin.getStats()),
  };
}

function authorize(credential: AdminCredential, call: { metadata: Metadata; getPeer(): string }, method: string, logger: Logger): void {
  const values = call.metadata.get("authorization").map((v) => (typeof v === "string" ? v : v.toString("latin1")));
  const result = credential.check(values);
  if (result === "ok") return;
  logger.warn({ method, reason: result, peer: call.getPeer() }, "admin call refused");
  throw new KeycapError(
    status.UNAUTHENTICATED,
    result,
    result === "ADMIN_CREDENTIAL_MISSING"
      ? "the admin API needs authorization: Bearer <admin credential>"
      : "the admin credential is not valid (a capability is not an admin credential)",
  );
}
