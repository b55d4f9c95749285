/**
 * The console's one way to produce HTML: every interpolated value is escaped unless it
 * is already SafeHtml (built by this module). Tool ids, keys, payloads and reasons are
 * attacker-controlled, so no page builds markup any other way.
 */

/** Markup produced by {@link html}; the only value interpolated without escaping. */
export class SafeHtml {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

const ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;", "`": "&#96;" };

/** Escapes text for HTML element content and quoted attribute values. */
export function escapeHtml(value: string): string {
  return value.replace(/[&<>"'`]/g, (c) => ESCAPES[c] ?? c);
}

/** What a template may interpolate: text (escaped), numbers, markup, or lists of them. */
export type HtmlValue = string | number | boolean | SafeHtml | undefined | null | readonly HtmlValue[];

function render(value: HtmlValue): string {
  if (value === undefined || value === null || value === false) return "";
  if (value instanceof SafeHtml) return value.text;
  if (Array.isArray(value)) return (value as readonly HtmlValue[]).map(render).join("");
  return escapeHtml(String(value));
}

/** Tagged template: `html\`<td>${toolId}</td>\`` escapes toolId. */
export function html(strings: TemplateStringsArray, ...values: HtmlValue[]): SafeHtml {
  let out = strings[0] ?? "";
  values.forEach((v, i) => {
    out += render(v) + (strings[i + 1] ?? "");
  });
  return new SafeHtml(out);
}

/** A query string built from parameters, each encoded (for href attributes, escaped again by html). */
export function query(params: Record<string, string | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== "") q.set(k, v);
  const s = q.toString();
  return s === "" ? "" : `?${s}`;
}
