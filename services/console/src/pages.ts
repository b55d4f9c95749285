/**
 * The console's pages, rendered on the server through html.ts (no script in any page).
 * Each function takes plain data and returns the page body; layout() wraps it.
 */
import { EffectKind, effectKindToJSON } from "../../../gen/ts/keycap/effect/v1/effect";
import type { Call } from "../../../gen/ts/keycap/kernel/v1/kernel";
import { CallOutcome, CallState, callOutcomeToJSON, callStateToJSON } from "../../../gen/ts/keycap/kernel/v1/kernel";
import type { Entry } from "../../../gen/ts/keycap/ledger/v1/ledger";
import type { Rejection } from "../../../gen/ts/keycap/ledger/v1/ledger_admin";
import type { ToolView } from "../../common/src/tool-view";
import type { StoryWrite } from "../../common/src/call-story";
import { html, query, SafeHtml } from "./html";
import { CHART_WINDOWS } from "./refusal-chart";

export interface PageContext {
  title: string;
  /** Which navigation item is current. */
  section: "overview" | "rejections" | "entries" | "calls" | "runs" | "signin";
  /** Signed in: shows the operator and the sign-out form. */
  session?: { operator: string; csrfToken: string };
}

const NAV: readonly { section: PageContext["section"]; href: string; label: string }[] = [
  { section: "overview", href: "/", label: "Overview" },
  { section: "rejections", href: "/rejections", label: "Refusals" },
  { section: "entries", href: "/entries", label: "Entries" },
  { section: "calls", href: "/calls", label: "Calls" },
  { section: "runs", href: "/run", label: "Runs" },
];

export function layout(ctx: PageContext, body: SafeHtml): string {
  const nav = ctx.session
    ? html`<nav aria-label="sections">
          ${NAV.map((n) => html`<a href="${n.href}" ${n.section === ctx.section ? html` aria-current="page"` : html``}>${n.label}</a>`)}
        </nav>
        <form method="post" action="/signout" class="signout">
          <input type="hidden" name="csrf" value="${ctx.session.csrfToken}" /><span class="who">${ctx.session.operator}</span>
          <button type="submit">Sign out</button>
        </form>`
    : html``;
  return html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>${ctx.title} · keycap console</title>
        <link rel="stylesheet" href="/assets/console.css" />
        <link rel="icon" href="data:," />
      </head>
      <body>
        <header><a class="brand" href="/">keycap console</a>${nav}</header>
        <main>
          <h1>${ctx.title}</h1>
          ${body}
        </main>
      </body>
    </html> `.text;
}

export function kindName(k: EffectKind): string {
  return effectKindToJSON(k).replace("EFFECT_KIND_", "").toLowerCase();
}

export function time(d: Date | undefined): string {
  return d
    ? d
        .toISOString()
        .replace("T", " ")
        .replace(/\.\d+Z$/, "Z")
    : "";
}

export function notice(kind: "error" | "ok", text: string): SafeHtml {
  return html`<p class="notice ${kind}" role="${kind === "error" ? "alert" : "status"}">${text}</p>`;
}

export function signInPage(error: string | undefined): SafeHtml {
  return html`${error ? notice("error", error) : html``}
    <form method="post" action="/signin" class="signin">
      <label for="token">Admin credential</label>
      <input id="token" name="token" type="password" autocomplete="current-password" required autofocus />
      <p class="hint">
        The ledger's admin credential (<code>KEYCAP_ADMIN_TOKEN</code>, or the file <code>.keycap/admin-token</code> that <code>make run</code> names).
      </p>
      <button type="submit">Sign in</button>
    </form>`;
}

/** Per-tool numbers for the overview. */
export interface ToolRow {
  toolId: string;
  effect: string;
  entries: number;
  duplicates: number;
  payloadMismatches: number;
  refusals: number;
}

export interface OverviewData {
  totals: { entries: number; duplicates: number; payloadMismatches: number; rejections: number };
  byReason: [string, number][];
  tools: ToolRow[];
  /** The per-tool entry numbers come from at most this many newest entries. */
  entriesScanned: number;
  entriesTruncated: boolean;
  chart: SafeHtml;
  window: string;
  /** Set when the overview is of one tool. */
  tool?: string;
  /** That tool's registered definition, when the kernel knows it. */
  definition?: ToolView;
}

/** A tool's definition as registered: what an operator judges a KEY_MISMATCH or a payload mismatch by. */
function definitionSection(v: ToolView): SafeHtml {
  const rows: [string, string | number][] = [["effect class", v.effectClass]];
  if (v.effectClass === "idempotent") {
    rows.push(
      ["key fields", v.keyFields.join(" ")],
      ["derivation version", v.derivationVersion || 1],
      ["context fields", v.contextFields.join(" ") || "(none)"],
    );
  }
  if (v.effectClass === "queryable") rows.push(["request id field", v.requestIdField]);
  rows.push(["owner", v.owner || "(none)"]);
  if (v.httpDestination) rows.push(["HTTP destination", v.httpDestination]);
  return html`<section class="definition" aria-label="definition">
    <h2>Definition</h2>
    ${detailList(rows)}
    ${
      v.argumentsSchema === undefined
        ? html`<p class="hint">No argument schema registered.</p>`
        : html`<details>
            <summary>argument schema</summary>
            <pre class="payload">${JSON.stringify(v.argumentsSchema, null, 2)}</pre>
          </details>`
    }
  </section>`;
}

function windowLinks(current: string, tool: string | undefined): SafeHtml {
  return html`<p class="windows">
    Window:
    ${CHART_WINDOWS.map((w) => (w.name === current ? html`<strong>${w.name}</strong> ` : html`<a href="/${query({ tool, window: w.name })}">${w.name}</a> `))}
  </p>`;
}

export function overviewPage(d: OverviewData): SafeHtml {
  const t = d.totals;
  const approx = d.entriesTruncated ? html`<p class="hint">Per-tool entry numbers count the newest ${d.entriesScanned} entries only.</p>` : html``;
  return html`<section class="cards" aria-label="totals">
      <div class="card"><span class="n">${t.entries}</span> entries</div>
      <div class="card"><span class="n">${t.duplicates}</span> duplicates</div>
      <div class="card"><span class="n">${t.payloadMismatches}</span> payload mismatches</div>
      <div class="card"><span class="n">${t.rejections}</span> refusals</div>
    </section>
    ${d.tool ? html`<p><a href="/">All tools</a></p>` : html``} ${d.definition ? definitionSection(d.definition) : html``}
    <h2>Refusals over time${d.tool ? html` of <span class="id">${d.tool}</span>` : html``}</h2>
    ${windowLinks(d.window, d.tool)} ${d.chart}
    <h2>Tools</h2>
    <div class="scroll">
      <table class="tools">
        <thead>
          <tr>
            <th>tool</th>
            <th>class</th>
            <th class="num">entries</th>
            <th class="num">duplicates</th>
            <th class="num">payload mismatches</th>
            <th class="num">refusals</th>
            <th></th>
          </tr>
        </thead>
        <tbody>
          ${d.tools.map(
            (r) =>
              html`<tr data-tool="${r.toolId}">
                <td class="id"><a href="/${query({ tool: r.toolId || "(unknown)" })}">${r.toolId || "(unattributed)"}</a></td>
                <td>${r.effect}</td>
                <td class="num">${r.entries}</td>
                <td class="num">${r.duplicates}</td>
                <td class="num">${r.payloadMismatches}</td>
                <td class="num"><a href="/rejections${query({ tool: r.toolId || undefined })}">${r.refusals}</a></td>
                <td><a href="/entries${query({ tool: r.toolId || undefined })}">entries</a></td>
              </tr>`,
          )}
        </tbody>
      </table>
    </div>
    ${approx}
    ${
      d.tool
        ? html``
        : html`<h2>Refusals by reason</h2>
            <div class="scroll">
              <table>
                <thead>
                  <tr>
                    <th>reason</th>
                    <th class="num">refusals</th>
                  </tr>
                </thead>
                <tbody>
                  ${d.byReason.map(
                    ([reason, n]) =>
                      html`<tr>
                        <td><a href="/rejections${query({ reason })}">${reason}</a></td>
                        <td class="num">${n}</td>
                      </tr>`,
                  )}
                </tbody>
              </table>
            </div>`
    }`;
}

export interface RejectionFilterForm {
  tool: string;
  reason: string;
  service: string;
  since: string;
  until: string;
}

/** Rows of a definition list; a value may be markup (a link), every other value is escaped text. */
export function detailList(rows: [string, string | number | boolean | SafeHtml | undefined][]): SafeHtml {
  return html`<dl>
    ${rows.map(
      ([k, v]) =>
        html`<dt>${k}</dt>
          <dd>${v instanceof SafeHtml ? v : v === undefined || v === "" ? "—" : String(v)}</dd>`,
    )}
  </dl>`;
}

/** A call id as a link to its story (ADR 0032); "" stays empty. */
/** A tool id linked to its page (definition, numbers, refusals over time). */
export function toolLink(toolId: string): SafeHtml {
  return toolId ? html`<a href="/${query({ tool: toolId })}">${toolId}</a>` : html``;
}

export function callLink(callId: string): SafeHtml {
  return callId ? html`<a href="/call${query({ id: callId })}">${callId}</a>` : html``;
}

/**
 * The writes under an entry's key: the first and each whose payload differed, with hash,
 * size and first bytes, so a payload mismatch can be compared by eye.
 */
export function writesTable(writes: readonly StoryWrite[]): SafeHtml {
  return html`<div class="scroll">
    <table class="writes">
      <thead>
        <tr>
          <th>write</th>
          <th>at</th>
          <th>call / attempt</th>
          <th>payload sha256</th>
          <th class="num">bytes</th>
          <th>payload (first bytes)</th>
        </tr>
      </thead>
      <tbody>
        ${writes.map(
          (w) =>
            html`<tr class="${w.first ? "first" : "mismatch"}">
              <td>${w.first ? "first" : html`<span class="tag">different payload</span>`}</td>
              <td>${time(w.at)}</td>
              <td class="id">${callLink(w.callId)} / ${w.attempt}</td>
              <td class="id">${w.payloadSha256}</td>
              <td class="num">${w.payloadSize}</td>
              <td>
                <pre class="payload preview">${w.preview.text}</pre>
                <span class="hint">${w.preview.note}</span>
              </td>
            </tr>`,
        )}
      </tbody>
    </table>
  </div>`;
}

export function rejectionsPage(f: RejectionFilterForm, reasons: string[], rows: Rejection[], nextPage: string, error: string | undefined): SafeHtml {
  const options = ["", ...reasons.filter((r) => r !== "")];
  if (f.reason !== "" && !options.includes(f.reason)) options.push(f.reason);
  return html`<form method="get" action="/rejections" class="filters">
      <label>Tool <input name="tool" value="${f.tool}" placeholder="any" /></label>
      <label
        >Reason
        <select name="reason">
          ${options.map((r) => html`<option value="${r}" ${r === f.reason ? html` selected` : html``}>${r === "" ? "any" : r}</option>`)}
        </select></label
      >
      <label>Service <input name="service" value="${f.service}" placeholder="any" list="services" /></label>
      <datalist id="services">${knownServices(rows).map((s) => html`<option value="${s}"></option>`)}</datalist>
      <label>Since <input name="since" value="${f.since}" placeholder="1h, 2d or ISO time" /></label>
      <label>Until <input name="until" value="${f.until}" placeholder="ISO time" /></label>
      <button type="submit">Filter</button>
    </form>
    ${error ? notice("error", error) : html``} ${rows.length === 0 ? html`<p class="empty">No refusals match.</p>` : html``}
    <div class="scroll">
      <table class="rejections">
        <thead>
          <tr>
            <th>time</th>
            <th>service</th>
            <th>tool</th>
            <th>reason</th>
            <th>code</th>
            <th>method</th>
            <th>count</th>
            <th>detail</th>
          </tr>
        </thead>
        <tbody>
          ${rows.map(
            (r) =>
              html`<tr data-rejection="${r.rejectionId}">
                <td>${time(r.rejectedAt)}</td>
                <td>${r.service || "ledger"}</td>
                <td class="id">${r.toolId ? toolLink(r.toolId) : "(unknown)"}${r.toolIdVerified ? html`` : html` <span class="tag">unverified</span>`}</td>
                <td>${r.reason}</td>
                <td>${r.code}</td>
                <td>${r.method}</td>
                <td class="num">${r.count}</td>
                <td>
                  <details>
                    <summary>details</summary>
                    ${detailList([
                      ["rejection id", r.rejectionId],
                      ["tool id verified", r.toolIdVerified ? "yes" : "no"],
                      ["principal", r.principal],
                      ["attempted key", r.attemptedKey],
                      ["capability key", r.capabilityKey],
                      ["attempted request id", r.attemptedRequestId],
                      ["capability request id", r.capabilityRequestId],
                      ["call id", callLink(r.callId)],
                      ["capability id", r.capabilityId],
                      ["key id", r.keyId],
                      ["effect kind", kindName(r.effectKind)],
                      ["peer", r.peer],
                      ["message", r.message],
                    ])}${r.attemptedKey ? html`<a href="/entries${query({ key: r.capabilityKey || r.attemptedKey })}">entry under the bound key</a>` : html``}
                  </details>
                </td>
              </tr>`,
          )}
        </tbody>
      </table>
    </div>
    ${nextPage ? html`<p><a rel="next" href="/rejections${query({ ...f, page: nextPage })}">Older refusals</a></p>` : html``}`;
}

/** The payload as the page shows it: text when it is UTF-8, else hex; at most 4 KiB. */
function payloadText(p: Uint8Array): { text: string; note: string } {
  const limit = 4096;
  const shown = p.subarray(0, limit);
  const cut = p.length > limit ? ` (first ${limit} of ${p.length} bytes)` : ` (${p.length} bytes)`;
  try {
    return { text: new TextDecoder("utf-8", { fatal: true }).decode(shown), note: `UTF-8${cut}` };
  } catch {
    return { text: Buffer.from(shown).toString("hex"), note: `hex, not UTF-8${cut}` };
  }
}

export function entryDetail(e: Entry, writes: readonly StoryWrite[]): SafeHtml {
  const p = payloadText(e.payload);
  return html`<section class="entry" data-entry="${e.entryId}">
    ${detailList([
      ["entry id", e.entryId],
      ["tool", e.toolId],
      ["class", kindName(e.effectKind)],
      [e.key ? "key" : "request id", e.key || e.requestId],
      ["call", callLink(e.callId)],
      ["attempt", e.attempt],
      ["principal", e.principal],
      ["capability id", e.capabilityId],
      ["recorded", time(e.recordedAt)],
      ["duplicates", e.duplicateCount],
      ["payload mismatch", e.payloadMismatch ? `yes (${e.payloadMismatchCount})` : "no"],
      ["payload sha256", e.payloadSha256],
    ])}
    <h3>Payload <span class="hint">${p.note}</span></h3>
    <pre class="payload">${p.text}</pre>
    ${
      writes.length > 1
        ? html`<h3>Writes under this key</h3>
            ${writesTable(writes)}`
        : html``
    }
  </section>`;
}

export function entriesPage(
  key: string,
  tool: string,
  found: { entry: Entry; writes: StoryWrite[] } | undefined,
  lookupError: string | undefined,
  rows: Entry[],
  nextPage: string,
): SafeHtml {
  return html`<form method="get" action="/entries" class="filters">
      <label class="wide">Key <input name="key" value="${key}" placeholder="the whole 43-character key" spellcheck="false" /></label>
      <button type="submit">Open</button>
    </form>
    ${lookupError ? notice("error", lookupError) : html``} ${found ? entryDetail(found.entry, found.writes) : html``}
    <h2>Entries${tool ? html` of <span class="id">${tool}</span>` : html``}</h2>
    <form method="get" action="/entries" class="filters">
      <label>Tool <input name="tool" value="${tool}" placeholder="any" /></label><button type="submit">List</button>
    </form>
    ${rows.length === 0 ? html`<p class="empty">No entries.</p>` : html``}
    <div class="scroll">
      <table class="entries">
        <thead>
          <tr>
            <th>recorded</th>
            <th>tool</th>
            <th>class</th>
            <th>key / request id</th>
            <th class="num">attempt</th>
            <th class="num">duplicates</th>
            <th>payload mismatch</th>
          </tr>
        </thead>
        <tbody>
          ${rows.map(
            (e) =>
              html`<tr>
                <td>${time(e.recordedAt)}</td>
                <td class="id">${toolLink(e.toolId)}</td>
                <td>${kindName(e.effectKind)}</td>
                <td class="id">${e.key ? html`<a href="/entries${query({ key: e.key, tool: tool || undefined })}">${e.key}</a>` : e.requestId}</td>
                <td class="num">${e.attempt}</td>
                <td class="num">${e.duplicateCount}</td>
                <td>${e.payloadMismatch ? `yes (${e.payloadMismatchCount})` : "no"}</td>
              </tr>`,
          )}
        </tbody>
      </table>
    </div>
    ${nextPage ? html`<p><a rel="next" href="/entries${query({ tool: tool || undefined, page: nextPage })}">Older entries</a></p>` : html``}`;
}

export function stateName(s: CallState): string {
  return callStateToJSON(s).replace("CALL_STATE_", "").toLowerCase();
}

export function outcomeName(o: CallOutcome): string {
  return callOutcomeToJSON(o).replace("CALL_OUTCOME_", "").toLowerCase();
}

function callRow(c: Call, settle: SafeHtml): SafeHtml {
  return html`<tr data-call="${c.callId}">
    <td class="id">${callLink(c.callId)}</td>
    <td class="id">${toolLink(c.toolId)}</td>
    <td>${kindName(c.effectKind)}</td>
    <td class="num">${c.attempt}</td>
    <td>${time(c.createdAt)}</td>
    <td>${c.principal}</td>
    <td><code class="args">${c.argumentsJson}</code></td>
    <td>${settle}</td>
  </tr>`;
}

const CALL_HEAD = html`<thead>
  <tr>
    <th>call</th>
    <th>tool</th>
    <th>class</th>
    <th class="num">attempt</th>
    <th>begun</th>
    <th>principal</th>
    <th>arguments</th>
    <th></th>
  </tr>
</thead>`;

export function callsPage(pending: Call[], indeterminate: Call[], csrfToken: string, message: SafeHtml | undefined): SafeHtml {
  return html`${message ?? html``} ${callSearchForm("call", "")}
    <h2>Indeterminate</h2>
    <p class="hint">Unsafe calls recovery found unfinished: whether they took effect is unknown. Settle each once you know.</p>
    ${indeterminate.length === 0 ? html`<p class="empty">No indeterminate calls.</p>` : html``}
    <div class="scroll">
      <table class="calls indeterminate">
        ${CALL_HEAD}
        <tbody>
          ${indeterminate.map((c) =>
            callRow(
              c,
              html`<form method="post" action="/calls/settle" class="settle">
                <input type="hidden" name="csrf" value="${csrfToken}" /><input type="hidden" name="call_id" value="${c.callId}" />
                <select name="outcome" aria-label="outcome">
                  <option value="succeeded">took effect (succeeded)</option>
                  <option value="failed">did not (failed)</option>
                </select>
                <input name="detail" placeholder="what you found" aria-label="detail" maxlength="2000" />
                <button type="submit">Settle…</button>
              </form>`,
            ),
          )}
        </tbody>
      </table>
    </div>
    <h2>Pending</h2>
    <p class="hint">Calls begun and not completed: <code>keycap recover</code> resumes them.</p>
    ${pending.length === 0 ? html`<p class="empty">No pending calls.</p>` : html``}
    <div class="scroll">
      <table class="calls pending">
        ${CALL_HEAD}
        <tbody>
          ${pending.map((c) => callRow(c, html``))}
        </tbody>
      </table>
    </div>`;
}

export function settleConfirmPage(c: Call, outcome: "succeeded" | "failed", detail: string, recorded: string, csrfToken: string): SafeHtml {
  return html`<p>
      You are about to settle this call as <strong class="outcome">${outcome}</strong>. It is recorded with the call and cannot be changed afterwards.
    </p>
    ${detailList([
      ["call", callLink(c.callId)],
      ["tool", c.toolId],
      ["class", kindName(c.effectKind)],
      ["state", stateName(c.state)],
      ["begun", time(c.createdAt)],
      ["arguments", c.argumentsJson],
      ["recorded detail", recorded],
    ])}
    <form method="post" action="/calls/settle/confirm" class="confirm">
      <input type="hidden" name="csrf" value="${csrfToken}" /><input type="hidden" name="call_id" value="${c.callId}" />
      <input type="hidden" name="outcome" value="${outcome}" /><input type="hidden" name="detail" value="${detail}" />
      <button type="submit" name="confirm" value="yes">Yes, settle as ${outcome}</button> <a href="/calls">Cancel</a>
    </form>`;
}

export function settledPage(c: Call, alreadyCompleted: boolean, by: string, at: Date): SafeHtml {
  return html`${notice("ok", alreadyCompleted ? `Call ${c.callId} was already settled as ${outcomeName(c.outcome)}.` : `Call ${c.callId} settled as ${outcomeName(c.outcome)}.`)}
    ${detailList([
      ["call", callLink(c.callId)],
      ["tool", c.toolId],
      ["state", stateName(c.state)],
      ["outcome", outcomeName(c.outcome)],
      ["recorded detail", c.outcomeDetail],
      ["settled by", by],
      ["settled at", time(at)],
      ["journal updated", time(c.updatedAt)],
    ])}
    <p><a href="/calls">Back to calls</a></p>`;
}

export function errorPage(message: string): SafeHtml {
  return notice("error", message);
}

/**
 * Services refusals are recorded under: keycap's own, and every sink seen on this page
 * (`sink:<name>`; a sink names itself, so the list cannot be closed — the field takes any name).
 */
function knownServices(rows: readonly { service: string }[]): string[] {
  return [...new Set(["ledger", "kernel", "mcp", "sink:gateway", ...rows.map((r) => r.service).filter((s) => s !== "")])].sort();
}

/** What the call search finds calls by (each an indexed field of the journal, ADR 0032). */
export type CallSearchField = "call" | "run" | "key" | "principal";

const SEARCH_FIELDS: readonly [CallSearchField, string][] = [
  ["call", "call id"],
  ["run", "run id"],
  ["key", "idempotency key"],
  ["principal", "principal"],
];

/** The search box of the calls pages: one field, one value. */
export function callSearchForm(by: CallSearchField, q: string): SafeHtml {
  return html`<form method="get" action="/calls/search" class="filters search" role="search">
    <label
      >Find calls by
      <select name="by">
        ${SEARCH_FIELDS.map(([v, label]) => html`<option value="${v}" ${v === by ? html` selected` : html``}>${label}</option>`)}
      </select></label
    >
    <label class="wide">Value <input name="q" value="${q}" spellcheck="false" required /></label>
    <button type="submit">Find</button>
  </form>`;
}
