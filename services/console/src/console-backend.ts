/**
 * What the console reads and does, over the services' own APIs with the signed-in
 * operator's admin credential: the ledger admin API for entries, refusals and totals,
 * the kernel for calls and their settlement (as `keycap calls` / `keycap complete`).
 */
import type { ChannelCredentials } from "@grpc/grpc-js";
import { AdminClient, KernelClient, KeycapClientError, Reasons, type RejectionFilter } from "../../../clients/ts/src";
import { toolView, type ToolView } from "../../common/src/tool-view";
import type { Call, CompleteCallResponse, RunCall, SearchCallsResponse } from "../../../gen/ts/keycap/kernel/v1/kernel";
import { callStory, type CallStory } from "../../common/src/call-story";
import type { Entry } from "../../../gen/ts/keycap/ledger/v1/ledger";
import type { GetEntryResponse, GetStatsResponse, ListEntriesResponse, ListRejectionsResponse } from "../../../gen/ts/keycap/ledger/v1/ledger_admin";
import type { RefusalPoint } from "./refusal-chart";

/** Bounds on what one page view reads, so a large ledger cannot make a page unbounded. */
export const OVERVIEW_ENTRY_LIMIT = 500;
export const CHART_REFUSAL_LIMIT = 1000;
const CALL_TIMEOUT_MS = 10_000;

export interface Addresses {
  admin: () => string;
  kernel: () => string;
}

/** Clients bound to one admin credential. */
export class ConsoleBackend {
  private readonly admin: AdminClient;
  private readonly kernel: KernelClient;

  constructor(addresses: Addresses, token: string, creds: () => ChannelCredentials) {
    this.admin = new AdminClient(addresses.admin(), token, creds());
    this.kernel = new KernelClient(addresses.kernel(), { token, credentials: creds() });
  }

  /**
   * A cheap admin RPC: resolves when the ledger accepts the credential. GetStats reads
   * counters (ADR 0025); a one-entry listing, the probe before, reads the whole collection on
   * FerretDB and made sign-in fail at 100,000 entries (bench/README "Volume").
   */
  async checkCredential(): Promise<void> {
    await this.admin.stats({ timeoutMs: 5000, retry: false });
  }

  stats(): Promise<GetStatsResponse> {
    return this.admin.stats({ timeoutMs: CALL_TIMEOUT_MS });
  }

  entriesPage(toolId: string, pageToken: string, pageSize = 50): Promise<ListEntriesResponse> {
    return this.admin.listEntriesPage(toolId, pageToken, pageSize, { timeoutMs: CALL_TIMEOUT_MS });
  }

  /** The newest entries (of a tool, or all), at most `limit`; `truncated` when there were more. */
  async newestEntries(toolId: string, limit = OVERVIEW_ENTRY_LIMIT): Promise<{ entries: Entry[]; truncated: boolean }> {
    const entries: Entry[] = [];
    let token = "";
    do {
      const page = await this.admin.listEntriesPage(toolId, token, Math.min(1000, limit - entries.length), { timeoutMs: CALL_TIMEOUT_MS });
      entries.push(...page.entries);
      token = page.nextPageToken;
    } while (token !== "" && entries.length < limit);
    return { entries, truncated: token !== "" };
  }

  /** The entry under a key with its writes (the first, and each whose payload differed). */
  entryByKey(key: string): Promise<GetEntryResponse | undefined> {
    return this.admin.getEntryWithWrites({ key }, { timeoutMs: CALL_TIMEOUT_MS });
  }

  /** A call's whole story (common/call-story.ts), or undefined when the kernel has no such call. */
  callStory(callId: string): Promise<CallStory | undefined> {
    const s = { timeoutMs: CALL_TIMEOUT_MS };
    return callStory(callId, {
      call: (id) => this.kernel.getCall(id, s),
      refusals: (id, limit) => this.admin.listRejectionsPage({ callId: id }, "", limit, s),
      entry: (key) => this.admin.getEntryWithWrites({ key }, s),
    });
  }

  /** Calls found by one field, newest first. */
  searchCalls(by: { callId: string } | { runId: string } | { key: string } | { principal: string }, pageToken: string): Promise<SearchCallsResponse> {
    return this.kernel.searchCallsPage(by, pageToken, 50, { timeoutMs: CALL_TIMEOUT_MS });
  }

  rejectionsPage(filter: RejectionFilter, pageToken: string, pageSize = 50): Promise<ListRejectionsResponse> {
    return this.admin.listRejectionsPage(filter, pageToken, pageSize, { timeoutMs: CALL_TIMEOUT_MS });
  }

  /** Refusals since `since` (of a tool, or all) as chart points, at most CHART_REFUSAL_LIMIT records. */
  async refusalPoints(toolId: string, since: Date): Promise<{ points: RefusalPoint[]; truncated: boolean }> {
    const points: RefusalPoint[] = [];
    let token = "";
    do {
      const page = await this.admin.listRejectionsPage({ toolId, since }, token, 1000, { timeoutMs: CALL_TIMEOUT_MS });
      for (const r of page.rejections) {
        // Recovery handing an Unsafe call to an operator is recorded, but it refused no one's call.
        if (r.rejectedAt && r.reason !== Reasons.UNSAFE_NOT_RESUMABLE) points.push({ at: r.rejectedAt, reason: r.reason, count: Number(r.count) || 1 });
      }
      token = page.nextPageToken;
    } while (token !== "" && points.length < CHART_REFUSAL_LIMIT);
    return { points, truncated: token !== "" };
  }

  async tools(): Promise<Map<string, string>> {
    const tools = await this.kernel.listTools({ timeoutMs: CALL_TIMEOUT_MS });
    return new Map(tools.map((t) => [t.toolId, t.effectClass?.kind?.$case ?? ""]));
  }

  /** A tool's definition as registered, or undefined when the kernel has no such tool. */
  async tool(toolId: string): Promise<ToolView | undefined> {
    try {
      const tool = await this.kernel.getTool(toolId, { timeoutMs: CALL_TIMEOUT_MS });
      return tool ? toolView(tool) : undefined;
    } catch (err) {
      if (KeycapClientError.from(err).reason === Reasons.TOOL_NOT_FOUND) return undefined;
      throw err;
    }
  }

  /** One run's calls in the order they were begun (the kernel's ListRunCalls, as an operator). */
  runCalls(runId: string): Promise<RunCall[]> {
    return this.kernel.listRunCalls(runId, { timeoutMs: CALL_TIMEOUT_MS });
  }

  pendingCalls(): Promise<Call[]> {
    return this.kernel.listPendingCalls("", { timeoutMs: CALL_TIMEOUT_MS });
  }

  indeterminateCalls(): Promise<Call[]> {
    return this.kernel.listIndeterminateCalls("", { timeoutMs: CALL_TIMEOUT_MS });
  }

  completeCall(callId: string, outcome: "succeeded" | "failed", detail: string): Promise<CompleteCallResponse> {
    return this.kernel.completeCall(callId, outcome, detail, { timeoutMs: CALL_TIMEOUT_MS });
  }

  close(): void {
    this.admin.close();
    this.kernel.close();
  }
}
