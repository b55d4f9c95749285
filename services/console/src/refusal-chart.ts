/**
 * Refusals over time: bucketed counts drawn as an inline SVG (no script, no library),
 * one stacked bar per bucket, one colour per reason. Reasons are attacker-influenced
 * text only through escaping (html.ts).
 */
import { html, type SafeHtml } from "./html";

/** A chart window the pages offer, with its bucket width. */
export interface ChartWindow {
  name: string;
  spanMs: number;
  bucketMs: number;
}

export const CHART_WINDOWS: readonly ChartWindow[] = [
  { name: "1h", spanMs: 3_600_000, bucketMs: 300_000 },
  { name: "24h", spanMs: 86_400_000, bucketMs: 3_600_000 },
  { name: "7d", spanMs: 604_800_000, bucketMs: 21_600_000 },
];

export function chartWindow(name: string | undefined): ChartWindow {
  return CHART_WINDOWS.find((w) => w.name === name) ?? (CHART_WINDOWS[1] as ChartWindow);
}

export interface RefusalPoint {
  at: Date;
  reason: string;
  /** A rate-limited summary stands for this many refusals. */
  count: number;
}

export interface Buckets {
  start: number;
  bucketMs: number;
  /** Per bucket: reason → refusals. */
  counts: Map<string, number>[];
  reasons: string[];
}

/** Counts refusals into equal buckets ending at `endMs` (the bucket holding endMs is the last). */
export function bucketRefusals(points: readonly RefusalPoint[], w: ChartWindow, endMs: number): Buckets {
  const n = Math.round(w.spanMs / w.bucketMs);
  const lastStart = Math.floor(endMs / w.bucketMs) * w.bucketMs;
  const start = lastStart - (n - 1) * w.bucketMs;
  const counts = Array.from({ length: n }, () => new Map<string, number>());
  const reasons = new Set<string>();
  for (const p of points) {
    const i = Math.floor((p.at.getTime() - start) / w.bucketMs);
    const bucket = counts[i];
    if (!bucket) continue;
    bucket.set(p.reason, (bucket.get(p.reason) ?? 0) + p.count);
    reasons.add(p.reason);
  }
  return { start, bucketMs: w.bucketMs, counts, reasons: [...reasons].sort() };
}

// Colour-blind-safe (Okabe-Ito), then greys for reasons past the eighth.
const PALETTE = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#d55e00", "#56b4e9", "#f0e442", "#000000"];

function colour(i: number): string {
  return PALETTE[i] ?? `hsl(0 0% ${30 + ((i * 11) % 50)}%)`;
}

function label(ms: number, bucketMs: number): string {
  const iso = new Date(ms).toISOString();
  return bucketMs < 86_400_000 ? `${iso.slice(5, 10)} ${iso.slice(11, 16)}` : iso.slice(0, 10);
}

/** The SVG (and its legend). Scales to its container's width; numbers are shown as titles. */
export function refusalChart(b: Buckets, caption: string): SafeHtml {
  const width = 720;
  const height = 200;
  const pad = { left: 36, right: 8, top: 8, bottom: 24 };
  const plotW = width - pad.left - pad.right;
  const plotH = height - pad.top - pad.bottom;
  const totals = b.counts.map((m) => [...m.values()].reduce((a, c) => a + c, 0));
  const max = Math.max(1, ...totals);
  const barW = plotW / b.counts.length;
  const bars = b.counts.map((m, i) => {
    let y = pad.top + plotH;
    const x = pad.left + i * barW;
    const from = b.start + i * b.bucketMs;
    return b.reasons.map((reason, r) => {
      const n = m.get(reason) ?? 0;
      if (n === 0) return html``;
      const h = (n / max) * plotH;
      y -= h;
      return html`<rect x="${x.toFixed(1)}" y="${y.toFixed(1)}" width="${Math.max(1, barW - 2).toFixed(1)}" height="${h.toFixed(1)}" fill="${colour(r)}"
        ><title>${label(from, b.bucketMs)}: ${n} ${reason}</title></rect
      >`;
    });
  });
  const ticks = [0, Math.ceil(max / 2), max].map(
    (v) => html`<text x="${pad.left - 4}" y="${(pad.top + plotH - (v / max) * plotH + 4).toFixed(1)}" text-anchor="end">${v}</text>`,
  );
  const every = Math.max(1, Math.ceil(b.counts.length / 6));
  const xLabels = b.counts.map((_, i) =>
    i % every === 0 ? html`<text x="${(pad.left + i * barW).toFixed(1)}" y="${height - 6}">${label(b.start + i * b.bucketMs, b.bucketMs)}</text>` : html``,
  );
  const total = totals.reduce((a, c) => a + c, 0);
  return html`<figure class="chart">
    <svg class="plot" viewBox="0 0 ${width} ${height}" role="img" aria-label="${caption}: ${total} refusals">
      <line x1="${pad.left}" y1="${pad.top + plotH}" x2="${width - pad.right}" y2="${pad.top + plotH}" class="axis" />
      ${ticks}${bars}${xLabels}
    </svg>
    <figcaption>${caption}: ${total} refusals${b.reasons.length === 0 ? " (none in this window)" : ""}</figcaption>
    <ul class="legend">
      ${b.reasons.map(
        (reason, r) =>
          html`<li>
            <svg class="swatch" viewBox="0 0 10 10" aria-hidden="true"><rect width="10" height="10" fill="${colour(r)}" /></svg>${reason}
          </li>`,
      )}
    </ul>
  </figure>`;
}
