/**
 * The console's call pages (issue 33 item 4, ADR 0032): one call's story — the call as
 * journaled, its timeline, the refusals naming it, the writes under its key — and the calls
 * found by call id, run id, key or principal. Every value is escaped by html.ts: call ids,
 * arguments, payloads and refusal messages are chosen by callers.
 */
import type { Call } from "../../../gen/ts/keycap/kernel/v1/kernel";
import { STORY_REFUSALS, type CallStory } from "../../common/src/call-story";
import { html, query, type SafeHtml } from "./html";
import { callLink, toolLink, callSearchForm, detailList, kindName, notice, outcomeName, stateName, time, writesTable, type CallSearchField } from "./pages";

/** Which search a value is for, by the form's `by` (unknown: by call id). */
export function searchFieldOf(by: string): CallSearchField {
  return by === "run" || by === "key" || by === "principal" ? by : "call";
}

function searchLink(by: CallSearchField, value: string): SafeHtml {
  return value ? html`<a href="/calls/search${query({ by, q: value })}">${value}</a>` : html``;
}

export function callPage(s: CallStory): SafeHtml {
  const settled = s.completedAt
    ? `${s.completedBy || "(not recorded)"} at ${time(s.completedAt)}`
    : s.state === "indeterminate"
      ? "nobody yet: an operator must"
      : "";
  return html`${callSearchForm("call", "")}
    <section class="call" data-call="${s.callId}" aria-label="call">
      ${detailList([
        ["call", s.callId],
        ["tool", html`<a href="/${query({ tool: s.toolId })}">${s.toolId}</a>`],
        ["class", s.effectClass],
        ["run", s.runId ? html`${searchLink("run", s.runId)} · <a href="/run${query({ id: s.runId })}">in order</a>` : html``],
        ["principal", searchLink("principal", s.principal)],
        ...(s.key ? [["key", html`${searchLink("key", s.key)} · <a href="/entries${query({ key: s.key })}">entry</a>`] as [string, SafeHtml]] : []),
        ...(s.requestId ? [["request id", s.requestId] as [string, string]] : []),
        ["mode", s.mode],
        ["state", s.state === "completed" ? `completed: ${s.outcome}` : s.state],
        ["outcome detail", s.outcomeDetail],
        ["attempt", s.attempt > 1 ? `${s.attempt} (resumed ${s.attempt - 1} time(s))` : s.attempt],
        ["capability", s.capabilityId],
        ["settled by", settled],
      ])}
      <h2>Arguments <span class="hint">as journaled</span></h2>
      <pre class="payload">${s.argumentsJson}</pre>
    </section>
    <h2>Timeline</h2>
    <ol class="timeline">
      ${s.timeline.map(
        (e) =>
          html`<li class="${e.event.replace(" ", "-")}">
            <span class="when">${time(e.at) || "—"}</span> <strong>${e.event}</strong>
            <span class="what">${e.detail}</span>
          </li>`,
      )}
    </ol>
    ${refusalsSection(s)} ${entrySection(s)}`;
}

function refusalsSection(s: CallStory): SafeHtml {
  if (s.refusals.length === 0)
    return html`<h2>Refusals naming this call</h2>
      <p class="empty">None.</p>`;
  return html`<h2>Refusals naming this call</h2>
    ${s.refusalsTruncated ? html`<p class="hint">The newest ${STORY_REFUSALS} are shown.</p>` : html``}
    <div class="scroll">
      <table class="rejections">
        <thead>
          <tr>
            <th>time</th>
            <th>service</th>
            <th>method</th>
            <th>reason</th>
            <th>principal</th>
            <th>attempted key</th>
            <th>bound key</th>
            <th>message</th>
          </tr>
        </thead>
        <tbody>
          ${s.refusals.map(
            (r) =>
              html`<tr>
                <td>${time(r.at)}</td>
                <td>${r.service}</td>
                <td>${r.method}</td>
                <td>${r.reason}</td>
                <td>${r.principal}</td>
                <td class="id">${r.attemptedKey}</td>
                <td class="id">${r.boundKey}</td>
                <td class="message">${r.message}</td>
              </tr>`,
          )}
        </tbody>
      </table>
    </div>`;
}

function entrySection(s: CallStory): SafeHtml {
  if (!s.entry)
    return s.key
      ? html`<h2>Entry</h2>
          <p class="empty">Nothing written under the key yet.</p>`
      : html``;
  const e = s.entry;
  return html`<h2>Entry</h2>
    <section class="entry" data-entry="${e.entryId}">
      ${detailList([
        ["entry id", e.entryId],
        ["written by call", callLink(e.callId)],
        ["recorded", time(e.recordedAt)],
        ["duplicate writes", e.duplicates],
        ["with a different payload", e.payloadMismatches],
      ])}
      ${
        e.payloadMismatches > e.writes.length - 1
          ? html`<p class="hint">The first ${e.writes.length - 1} writes with a different payload are listed.</p>`
          : html``
      }
      ${writesTable(e.writes)}
    </section>`;
}

/** The calls found, newest first, each linking to its story. */
export function callSearchPage(by: CallSearchField, q: string, calls: Call[], nextPage: string, error: string | undefined): SafeHtml {
  return html`${callSearchForm(by, q)} ${error ? notice("error", error) : html``}
  ${!error && calls.length === 0 ? html`<p class="empty">No calls found.</p>` : html``}
  ${
    calls.length === 0
      ? html``
      : html`<div class="scroll">
          <table class="calls found">
            <thead>
              <tr>
                <th>begun</th>
                <th>call</th>
                <th>tool</th>
                <th>class</th>
                <th>run</th>
                <th>principal</th>
                <th>state</th>
              </tr>
            </thead>
            <tbody>
              ${calls.map(
                (c) =>
                  html`<tr data-call="${c.callId}">
                    <td>${time(c.createdAt)}</td>
                    <td class="id">${callLink(c.callId)}</td>
                    <td class="id">${toolLink(c.toolId)}</td>
                    <td>${kindName(c.effectKind)}</td>
                    <td class="id">${c.runId}</td>
                    <td>${c.principal}</td>
                    <td>${stateName(c.state)}${c.outcome ? ` (${outcomeName(c.outcome)})` : ""}</td>
                  </tr>`,
              )}
            </tbody>
          </table>
        </div>`
  }
  ${nextPage ? html`<p><a rel="next" href="/calls/search${query({ by, q, page: nextPage })}">Older calls</a></p>` : html``}`;
}
