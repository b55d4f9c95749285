/**
 * Resource use of the services under test, read from /proc (Linux): CPU time
 * (utime + stime of /proc/<pid>/stat) over a window, and resident memory (VmRSS sampled
 * during the window, VmHWM = the process's peak since start).
 */
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";

/** What one process used during a window. */
export interface ProcUsage {
  /** CPU seconds (user + system) spent in the window. */
  cpuSeconds: number;
  /** cpuSeconds / wall seconds: 1.0 = one core busy for the whole window. */
  cores: number;
  /** Highest VmRSS sampled in the window, MiB. */
  peakRssMiB: number;
  /** VmHWM at the end of the window (peak RSS since the process started), MiB. */
  hwmMiB: number;
  /** VmRSS at the end of the window, MiB. */
  endRssMiB: number;
}

let clockTicks: number | undefined;
function ticksPerSecond(): number {
  if (clockTicks === undefined) {
    try {
      clockTicks = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;
    } catch {
      clockTicks = 100;
    }
  }
  return clockTicks;
}

/** The fields of /proc/<pid>/stat this module reads; undefined if the process is gone. */
function statOf(pid: number): { comm: string; ppid: number; ownTicks: number; reapedChildTicks: number } | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name (which may contain spaces) start at field 3:
    // ppid is field 4, utime/stime 14–15, cutime/cstime 16–17.
    const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return {
      comm: stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")),
      ppid: Number(rest[1]),
      ownTicks: Number(rest[11]) + Number(rest[12]),
      reapedChildTicks: Number(rest[13]) + Number(rest[14]),
    };
  } catch {
    return undefined;
  }
}

/** Every process's stat, by pid. */
function allStats(): Map<number, NonNullable<ReturnType<typeof statOf>>> {
  const out = new Map<number, NonNullable<ReturnType<typeof statOf>>>();
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const st = statOf(Number(entry));
    if (st) out.set(Number(entry), st);
  }
  return out;
}

/** CPU seconds (user + system) a process has used so far; undefined if it is gone. */
export function cpuSecondsOf(pid: number): number | undefined {
  const st = statOf(pid);
  return st === undefined ? undefined : st.ownTicks / ticksPerSecond();
}

/**
 * CPU seconds a process and all its descendants have used so far, those that exited
 * included (a reaped child's time is in its parent's cutime/cstime). For servers that
 * work in child processes: PostgreSQL's backends under FerretDB's wrapper.
 */
export function treeCpuSecondsOf(root: number): number | undefined {
  const stats = allStats();
  if (!stats.has(root)) return undefined;
  const children = new Map<number, number[]>();
  for (const [pid, st] of stats) {
    const siblings = children.get(st.ppid);
    if (siblings) siblings.push(pid);
    else children.set(st.ppid, [pid]);
  }
  let ticks = 0;
  for (const todo = [root]; todo.length > 0;) {
    const pid = todo.pop()!;
    const st = stats.get(pid)!;
    ticks += st.ownTicks + st.reapedChildTicks;
    todo.push(...(children.get(pid) ?? []));
  }
  return ticks / ticksPerSecond();
}

/** VmRSS and VmHWM in MiB; undefined if the process is gone. */
export function memoryOf(pid: number): { rssMiB: number; hwmMiB: number } | undefined {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, "utf8");
    const kb = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? Number.NaN);
    return { rssMiB: kb("VmRSS") / 1024, hwmMiB: kb("VmHWM") / 1024 };
  } catch {
    return undefined;
  }
}

/**
 * Samples a set of named processes over a window. CPU of a name in `trees` is its
 * process tree's (treeCpuSecondsOf); memory is always the named process's own.
 */
export class ProcSampler {
  private readonly cpuStart = new Map<string, number>();
  private readonly peak = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private startedAt = 0;

  constructor(
    private readonly pids: Record<string, number>,
    private readonly intervalMs = 200,
    private readonly trees: ReadonlySet<string> = new Set(),
  ) {}

  private cpu(name: string, pid: number): number | undefined {
    return this.trees.has(name) ? treeCpuSecondsOf(pid) : cpuSecondsOf(pid);
  }

  start(): void {
    this.startedAt = performance.now();
    for (const [name, pid] of Object.entries(this.pids)) {
      this.cpuStart.set(name, this.cpu(name, pid) ?? 0);
      this.peak.set(name, 0);
    }
    this.sample();
    this.timer = setInterval(() => this.sample(), this.intervalMs);
  }

  /** Ends the window and returns what each process used in it. */
  stop(): Record<string, ProcUsage> {
    if (this.timer) clearInterval(this.timer);
    this.sample();
    const wall = (performance.now() - this.startedAt) / 1000;
    const out: Record<string, ProcUsage> = {};
    for (const [name, pid] of Object.entries(this.pids)) {
      const cpu = (this.cpu(name, pid) ?? Number.NaN) - (this.cpuStart.get(name) ?? 0);
      const mem = memoryOf(pid);
      out[name] = {
        cpuSeconds: cpu,
        cores: wall > 0 ? cpu / wall : Number.NaN,
        peakRssMiB: this.peak.get(name) ?? Number.NaN,
        hwmMiB: mem?.hwmMiB ?? Number.NaN,
        endRssMiB: mem?.rssMiB ?? Number.NaN,
      };
    }
    return out;
  }

  private sample(): void {
    for (const [name, pid] of Object.entries(this.pids)) {
      const mem = memoryOf(pid);
      if (mem && mem.rssMiB > (this.peak.get(name) ?? 0)) this.peak.set(name, mem.rssMiB);
    }
  }
}

/** Child processes of `parent` whose command name starts with `prefix` (from /proc). */
export function findChildPids(parent: number, prefix: string): number[] {
  return [...allStats()].filter(([, st]) => st.ppid === parent && st.comm.startsWith(prefix)).map(([pid]) => pid);
}

/** The whole machine's CPU time so far (first line of /proc/stat), seconds; undefined off Linux. */
export function machineCpuSeconds(): { busy: number; total: number } | undefined {
  try {
    const line = fs.readFileSync("/proc/stat", "utf8").split("\n", 1)[0]!;
    // cpu user nice system idle iowait irq softirq steal guest guest_nice (guest time is already in user)
    const f = line.trim().split(/\s+/).slice(1, 9).map(Number);
    const total = f.reduce((a, b) => a + b, 0);
    const idle = (f[3] ?? 0) + (f[4] ?? 0);
    return { busy: (total - idle) / ticksPerSecond(), total: total / ticksPerSecond() };
  } catch {
    return undefined;
  }
}
