import { credentials, type ChannelCredentials } from "@grpc/grpc-js";
import type { Entry } from "../gen/keycap/ledger/v1/ledger";
import {
  LedgerAdminServiceClient,
  type GetEntryResponse,
  type GetStatsResponse,
  type ListEntriesResponse,
  type ListRejectionsRequest,
  type ListRejectionsResponse,
  type Rejection,
} from "../gen/keycap/ledger/v1/ledger_admin";
import { KeycapClientError } from "./errors";
import { callUnary, collectPages, type CallSettings } from "./rpc";

/** Filters of {@link AdminClient.listRejections}. */
export interface RejectionFilter {
  toolId?: string;
  reason?: string;
  since?: Date;
  until?: Date;
  /** Only refusals of this service: "ledger" or "kernel". */
  service?: string;
  /** Only refusals that name this call id. */
  callId?: string;
}

/** Operator client of keycap.ledger.v1.LedgerAdminService (needs the admin credential). */
export class AdminClient {
  readonly raw: LedgerAdminServiceClient;

  constructor(
    readonly address: string,
    private readonly token: string,
    creds?: ChannelCredentials,
  ) {
    this.raw = new LedgerAdminServiceClient(address, creds ?? credentials.createInsecure());
  }

  listEntriesPage(toolId = "", pageToken = "", pageSize = 100, s?: CallSettings): Promise<ListEntriesResponse> {
    return callUnary(this.raw.listEntries, this.raw, { toolId, pageSize, pageToken }, this.token, s);
  }

  /** Every entry (of one tool, or all), newest first. */
  listEntries(toolId = "", s?: CallSettings): Promise<Entry[]> {
    return collectPages(async (pageToken) => {
      const res = await this.listEntriesPage(toolId, pageToken, 1000, s);
      return { items: res.entries, nextPageToken: res.nextPageToken };
    });
  }

  /** The entry under an idempotency key; undefined when there is none. */
  async getEntryByKey(key: string, s?: CallSettings): Promise<Entry | undefined> {
    return (await this.getEntry({ $case: "key", value: key }, s))?.entry;
  }

  /** The entry with this id; undefined when there is none. */
  async getEntryById(entryId: string, s?: CallSettings): Promise<Entry | undefined> {
    return (await this.getEntry({ $case: "entryId", value: entryId }, s))?.entry;
  }

  /**
   * The entry under a key (`{ key }`) or with an id (`{ entryId }`) with its writes: the first,
   * then each whose payload differed (hash, size, first bytes); undefined when there is none.
   */
  getEntryWithWrites(by: { key: string } | { entryId: string }, s?: CallSettings): Promise<GetEntryResponse | undefined> {
    return this.getEntry("key" in by ? { $case: "key", value: by.key } : { $case: "entryId", value: by.entryId }, s);
  }

  private async getEntry(
    selector: { $case: "key"; value: string } | { $case: "entryId"; value: string },
    s?: CallSettings,
  ): Promise<GetEntryResponse | undefined> {
    try {
      return await callUnary(this.raw.getEntry, this.raw, { selector }, this.token, s);
    } catch (err) {
      if (KeycapClientError.from(err).codeName === "NOT_FOUND") return undefined;
      throw err;
    }
  }

  listRejectionsPage(filter: RejectionFilter = {}, pageToken = "", pageSize = 100, s?: CallSettings): Promise<ListRejectionsResponse> {
    const req: ListRejectionsRequest = {
      toolId: filter.toolId ?? "",
      reason: filter.reason ?? "",
      since: filter.since,
      until: filter.until,
      pageSize,
      pageToken,
      service: filter.service ?? "",
      callId: filter.callId ?? "",
    };
    return callUnary(this.raw.listRejections, this.raw, req, this.token, s);
  }

  /** Every matching refusal, newest first. */
  listRejections(filter: RejectionFilter = {}, s?: CallSettings): Promise<Rejection[]> {
    return collectPages(async (pageToken) => {
      const res = await this.listRejectionsPage(filter, pageToken, 1000, s);
      return { items: res.rejections, nextPageToken: res.nextPageToken };
    });
  }

  stats(s?: CallSettings): Promise<GetStatsResponse> {
    return callUnary(this.raw.getStats, this.raw, {}, this.token, s);
  }

  close(): void {
    this.raw.close();
  }
}
