/**
 * The console's read-only pages as data: what each page shows, gathered from the ledger admin
 * API and the kernel (console-backend.ts) and handed to the page templates (pages.ts).
 */
import { runCallView } from "../../common/src/run-view";
import { CHART_REFUSAL_LIMIT, OVERVIEW_ENTRY_LIMIT, type ConsoleBackend } from "./console-backend";
import { runPage } from "./run-page";
import type { SafeHtml } from "./html";
import { KeycapClientError } from "../../../clients/ts/src";
import { callPage, callSearchPage, searchFieldOf } from "./call-page";
import { errorPage, callsPage, entriesPage, overviewPage, rejectionsPage, type RejectionFilterForm, type ToolRow } from "./pages";
import { storyWrite } from "../../common/src/call-story";
import { bucketRefusals, chartWindow, refusalChart } from "./refusal-chart";

export async function overviewView(b: ConsoleBackend, toolParam: string, windowName: string): Promise<SafeHtml> {
  // "(unknown)" selects refusals that no tool id could be attributed to.
  const tool = toolParam === "(unknown)" ? "" : toolParam;
  const w = chartWindow(windowName);
  const now = Date.now();
  const [stats, tools, newest, points, definition] = await Promise.all([
    b.stats(),
    b.tools().catch(() => new Map<string, string>()),
    b.newestEntries(tool),
    b.refusalPoints(tool, new Date(now - w.spanMs)),
    tool ? b.tool(tool) : Promise.resolve(undefined),
  ]);
  const rows = new Map<string, ToolRow>();
  const row = (id: string): ToolRow => {
    let r = rows.get(id);
    if (!r) {
      r = { toolId: id, effect: tools.get(id) ?? "", entries: 0, duplicates: 0, payloadMismatches: 0, refusals: 0 };
      rows.set(id, r);
    }
    return r;
  };
  if (!toolParam) for (const id of tools.keys()) row(id);
  for (const e of newest.entries) {
    const r = row(e.toolId);
    r.entries += 1;
    r.duplicates += Number(e.duplicateCount);
    r.payloadMismatches += Number(e.payloadMismatchCount);
  }
  for (const [id, n] of Object.entries(stats.rejectionsByTool)) if (!toolParam || id === tool) row(id).refusals = Number(n);
  const sorted = [...rows.values()].sort((a, c) => c.refusals - a.refusals || a.toolId.localeCompare(c.toolId));
  const selected = toolParam ? rows.get(tool) : undefined;
  const totals = toolParam
    ? {
        entries: selected?.entries ?? 0,
        duplicates: selected?.duplicates ?? 0,
        payloadMismatches: selected?.payloadMismatches ?? 0,
        rejections: selected?.refusals ?? 0,
      }
    : {
        entries: Number(stats.entries),
        duplicates: Number(stats.duplicates),
        payloadMismatches: Number(stats.payloadMismatches),
        rejections: Number(stats.rejections),
      };
  const caption = `${toolParam ? `Refusals of ${toolParam}` : "All refusals"}, last ${w.name}${points.truncated ? ` (newest ${CHART_REFUSAL_LIMIT} records)` : ""}`;
  return overviewPage({
    totals,
    byReason: Object.entries(stats.rejectionsByReason)
      .map(([k, v]): [string, number] => [k, Number(v)])
      .sort((a, c) => c[1] - a[1]),
    tools: sorted,
    entriesScanned: OVERVIEW_ENTRY_LIMIT,
    entriesTruncated: newest.truncated,
    chart: refusalChart(bucketRefusals(points.points, w, now), caption),
    window: w.name,
    ...(toolParam ? { tool: toolParam } : {}),
    ...(definition ? { definition } : {}),
  });
}

export async function rejectionsView(b: ConsoleBackend, url: URL): Promise<SafeHtml> {
  const p = (name: string): string => (url.searchParams.get(name) ?? "").trim();
  const f: RejectionFilterForm = { tool: p("tool"), reason: p("reason"), service: p("service"), since: p("since"), until: p("until") };
  const stats = await b.stats();
  const reasons = Object.keys(stats.rejectionsByReason).sort();
  let since: Date | undefined;
  let until: Date | undefined;
  try {
    since = f.since ? parseTime(f.since, "Since") : undefined;
    until = f.until ? parseTime(f.until, "Until") : undefined;
    if (since && until && since.getTime() >= until.getTime()) throw new RangeError("Since must be before Until.");
  } catch (err) {
    return rejectionsPage(f, reasons, [], "", err instanceof Error ? err.message : String(err));
  }
  const page = await b.rejectionsPage(
    { toolId: f.tool, reason: f.reason, service: f.service, ...(since ? { since } : {}), ...(until ? { until } : {}) },
    p("page"),
  );
  return rejectionsPage(f, reasons, page.rejections, page.nextPageToken, undefined);
}

export async function entriesView(b: ConsoleBackend, key: string, tool: string, pageToken: string): Promise<SafeHtml> {
  let found;
  let lookupError: string | undefined;
  if (key !== "") {
    found = await b.entryByKey(key);
    if (!found) {
      const n = [...key].length;
      lookupError = `No entry under this key${n !== 43 ? ` (a key is 43 characters; this one has ${n})` : ""}.`;
    }
  }
  const page = await b.entriesPage(tool, pageToken);
  const shown = found?.entry ? { entry: found.entry, writes: found.writes.map(storyWrite) } : undefined;
  return entriesPage(key, tool, shown, lookupError, page.entries, page.nextPageToken);
}

export async function callsView(b: ConsoleBackend, csrfToken: string, message: SafeHtml | undefined): Promise<SafeHtml> {
  const [pending, indeterminate] = await Promise.all([b.pendingCalls(), b.indeterminateCalls()]);
  return callsPage(pending, indeterminate, csrfToken, message);
}

function parseTime(value: string, what: string): Date {
  const rel = /^(\d+)([smhd])$/.exec(value);
  if (rel) {
    const unit = { s: 1e3, m: 6e4, h: 3.6e6, d: 8.64e7 }[rel[2] as "s" | "m" | "h" | "d"];
    return new Date(Date.now() - Number(rel[1]) * unit);
  }
  const d = new Date(value);
  if (Number.isNaN(d.getTime())) throw new RangeError(`${what}: expected an ISO time or a duration like 15m, 2h, 1d.`);
  return d;
}

/** A page with its status, for views that can answer "not found" or "not a valid id". */
export interface ViewAnswer {
  status: number;
  title: string;
  body: SafeHtml;
}

/** One call's story; 404 when the kernel has no such call, 400 when the id cannot be one. */
export async function callView(b: ConsoleBackend, callId: string): Promise<ViewAnswer> {
  try {
    const story = await b.callStory(callId);
    if (!story) return { status: 404, title: "Call not found", body: errorPage(`No call ${JSON.stringify(callId)} in the journal.`) };
    return { status: 200, title: `Call ${callId}`, body: callPage(story) };
  } catch (err) {
    const e = KeycapClientError.from(err);
    if (e.codeName !== "INVALID_ARGUMENT") throw err;
    return { status: 400, title: "Call", body: errorPage(`Not a call id: ${e.message}`) };
  }
}

/** Calls found by one field; a value the kernel refuses (too long, not a call id) is said on the page. */
export async function callSearchView(b: ConsoleBackend, url: URL): Promise<ViewAnswer> {
  const by = searchFieldOf(url.searchParams.get("by") ?? "");
  const q = (url.searchParams.get("q") ?? "").trim();
  if (q === "") return { status: 200, title: "Find calls", body: callSearchPage(by, q, [], "", "Enter a value to find calls by.") };
  const criterion = by === "call" ? { callId: q } : by === "run" ? { runId: q } : by === "key" ? { key: q } : { principal: q };
  try {
    const page = await b.searchCalls(criterion, url.searchParams.get("page") ?? "");
    return { status: 200, title: "Find calls", body: callSearchPage(by, q, page.calls, page.nextPageToken, undefined) };
  } catch (err) {
    const e = KeycapClientError.from(err);
    if (e.codeName !== "INVALID_ARGUMENT") throw err;
    return { status: 400, title: "Find calls", body: callSearchPage(by, q, [], "", e.message) };
  }
}

/** One run's calls in order (issue 30); a run id the kernel refuses (too long) is said on the page. */
export async function runView(b: ConsoleBackend, runId: string): Promise<ViewAnswer> {
  if (runId === "") return { status: 200, title: "Runs", body: runPage("", [], undefined) };
  try {
    const calls = (await b.runCalls(runId)).map(runCallView);
    return { status: 200, title: `Run ${runId}`, body: runPage(runId, calls, undefined) };
  } catch (err) {
    const e = KeycapClientError.from(err);
    if (e.codeName !== "INVALID_ARGUMENT") throw err;
    return { status: 400, title: "Runs", body: runPage(runId, [], `Not a run id: ${e.message}`) };
  }
}
