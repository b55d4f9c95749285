/**
 * The console's run page (issue 30, ADR 0028): one agent run's calls in the order they were
 * begun — position, tool, key or request id, outcome, mode, and the run a replay replays or a
 * shadow run shadows — as `keycap runs show` prints them. Run ids, tool ids and keys are
 * chosen by callers; html.ts escapes every one.
 */
import type { RunCallView } from "../../common/src/run-view";
import { html, query, type SafeHtml } from "./html";
import { callLink, notice, toolLink } from "./pages";

function runForm(runId: string): SafeHtml {
  return html`<form method="get" action="/run" class="filters search" role="search">
    <label class="wide">Run id <input name="id" value="${runId}" spellcheck="false" required /></label>
    <button type="submit">Show the run</button>
  </form>`;
}

export function runLink(runId: string): SafeHtml {
  return runId ? html`<a href="/run${query({ id: runId })}">${runId}</a>` : html``;
}

/** `calls`: the run's calls in order; `error`: why they could not be read (a bad run id). */
export function runPage(runId: string, calls: readonly RunCallView[], error: string | undefined): SafeHtml {
  if (error) return html`${runForm(runId)}${notice("error", error)}`;
  if (runId === "")
    return html`${runForm("")}
      <p class="hint">A run's calls in the order they were begun, with the mode each ran in (live, shadow, replay).</p>`;
  const denied = calls.length === 0 ? html`<p class="empty">No calls in this run.</p>` : html``;
  return html`${runForm(runId)}
    <p class="hint">
      Replay and shadow runs: <code>keycap runs diff &lt;recorded&gt; &lt;replay&gt;</code> lines one up with the run it replays or shadows. Unsafe calls a
      sandbox run was denied are refusals (<a href="/rejections${query({ reason: "SANDBOX_UNSAFE_DENIED" })}">SANDBOX_UNSAFE_DENIED</a>), not calls.
    </p>
    ${denied}
    <div class="scroll">
      <table class="run">
        <thead>
          <tr>
            <th>#</th>
            <th>tool</th>
            <th>key / request id</th>
            <th>outcome</th>
            <th>mode</th>
            <th>of run</th>
            <th>call</th>
          </tr>
        </thead>
        <tbody>
          ${calls.map(
            (c) =>
              html`<tr data-mode="${c.mode}">
                <td>${c.position}</td>
                <td class="id">${toolLink(c.toolId)}</td>
                <td class="id">${c.key ? html`<a href="/entries${query({ key: c.key })}">${c.key}</a>` : c.requestId || "-"}</td>
                <td>${c.outcome}</td>
                <td>${c.mode}</td>
                <td class="id">${c.ofRun ? runLink(c.ofRun) : "-"}</td>
                <td class="id">${callLink(c.callId)}</td>
              </tr>`,
          )}
        </tbody>
      </table>
    </div>`;
}
