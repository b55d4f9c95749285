/**
 * Summarises a V8 CPU profile (`node --cpu-prof`, a .cpuprofile file): self time and
 * inclusive time per function, the busiest first, with file:line relative to the project.
 *
 * Usage: node dist/bench/profile.js <file.cpuprofile> [top]
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { projectRoot } from "../services/common/src/repo-paths";

interface CpuProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number };
  children?: number[];
}

interface CpuProfile {
  nodes: CpuProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** One function's share of the profile. */
export interface ProfileRow {
  fn: string;
  where: string;
  selfMs: number;
  selfPct: number;
  totalMs: number;
  totalPct: number;
}

/** Self and inclusive time per function; percentages of the non-idle time. */
export function summariseProfile(file: string): { busyMs: number; idleMs: number; rows: ProfileRow[] } {
  const prof = JSON.parse(fs.readFileSync(file, "utf8")) as CpuProfile;
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of prof.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const root = projectRoot();
  const keyOf = (n: CpuProfileNode): string => {
    const f = n.callFrame;
    let url = f.url.replace(/^file:\/\//, "");
    if (url.startsWith(root)) url = path.relative(root, url);
    return `${f.functionName || "(anonymous)"}\t${url ? `${url}:${f.lineNumber + 1}` : ""}`;
  };
  const self = new Map<string, number>();
  const total = new Map<string, number>();
  let idle = 0;
  let busy = 0;
  for (let i = 0; i < prof.samples.length; i++) {
    const dt = (prof.timeDeltas[i] ?? 0) / 1000;
    const node = byId.get(prof.samples[i] as number);
    if (!node) continue;
    if (node.callFrame.functionName === "(idle)") {
      idle += dt;
      continue;
    }
    busy += dt;
    const k = keyOf(node);
    self.set(k, (self.get(k) ?? 0) + dt);
    const seen = new Set<string>();
    for (let id: number | undefined = node.id; id !== undefined; id = parent.get(id)) {
      const n = byId.get(id);
      if (!n || n.callFrame.functionName === "(root)") break;
      const key = keyOf(n);
      if (seen.has(key)) continue;
      seen.add(key);
      total.set(key, (total.get(key) ?? 0) + dt);
    }
  }
  const rows: ProfileRow[] = [...total.entries()].map(([k, t]) => {
    const [fn = "", where = ""] = k.split("\t");
    const s = self.get(k) ?? 0;
    return { fn, where, selfMs: s, selfPct: (100 * s) / busy, totalMs: t, totalPct: (100 * t) / busy };
  });
  return { busyMs: busy, idleMs: idle, rows };
}

/** Markdown tables: top self time, and top inclusive time of project code. */
export function profileMarkdown(file: string, top = 25): string {
  const { busyMs, idleMs, rows } = summariseProfile(file);
  const out: string[] = [];
  out.push(`Profile ${path.basename(file)}: busy ${(busyMs / 1000).toFixed(2)} s, idle ${(idleMs / 1000).toFixed(2)} s`);
  out.push("");
  out.push("| self % | self ms | function | where |");
  out.push("| ---: | ---: | --- | --- |");
  for (const r of [...rows].sort((a, b) => b.selfMs - a.selfMs).slice(0, top)) {
    out.push(`| ${r.selfPct.toFixed(1)} | ${r.selfMs.toFixed(0)} | ${r.fn} | ${r.where} |`);
  }
  out.push("");
  out.push("| incl. % | incl. ms | function (project code) | where |");
  out.push("| ---: | ---: | --- | --- |");
  const project = rows.filter((r) => /^(dist|services|clients|gen)\//.test(r.where));
  for (const r of project.sort((a, b) => b.totalMs - a.totalMs).slice(0, top)) {
    out.push(`| ${r.totalPct.toFixed(1)} | ${r.totalMs.toFixed(0)} | ${r.fn} | ${r.where} |`);
  }
  return out.join("\n") + "\n";
}

if (require.main === module) {
  const file = process.argv[2];
  if (!file) {
    process.stderr.write("usage: node dist/bench/profile.js <file.cpuprofile> [top]\n");
    process.exit(2);
  }
  process.stdout.write(profileMarkdown(file, Number(process.argv[3] ?? "25")));
}
