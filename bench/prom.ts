/**
 * Reading a keycap process's Prometheus metrics (`GET /metrics`, ADR 0017) for the bench: the
 * text format parsed into samples, and the difference of two scrapes for the series the
 * chain pass (bench/chain.ts) and the round-trip pass's hop count (bench/round-trips.ts) use:
 * RPCs by method (`keycap_rpcs_total`, `keycap_rpc_duration_seconds`) and MongoDB commands by
 * command (`keycap_mongodb_command_duration_seconds`).
 */
import * as http from "node:http";
import { METRIC } from "../services/common/src/metrics";

/** One sample: metric name, its labels, its value. */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** `GET http://<address>/metrics`, parsed. */
export function scrape(address: string): Promise<Sample[]> {
  return new Promise((resolve, reject) => {
    const req = http.get(`http://${address}/metrics`, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (body += c));
      res.on("end", () => (res.statusCode === 200 ? resolve(parseText(body)) : reject(new Error(`GET ${address}/metrics: ${res.statusCode}`))));
    });
    req.on("error", reject);
    req.setTimeout(10_000, () => req.destroy(new Error(`GET ${address}/metrics: no answer within 10 s`)));
  });
}

/** Parses the Prometheus text exposition format (comments skipped). */
export function parseText(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    if (m[3]) for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!.replace(/\\(.)/g, "$1");
    out.push({ name: m[1]!, labels, value: Number(m[4]) });
  }
  return out;
}

/** A histogram's count and sum (seconds) per value of one label, the other labels summed over. */
export type ByLabel = Record<string, { count: number; sum: number }>;

/** `<base>_count` and `<base>_sum` of a histogram, summed per value of `label`. */
export function histogramBy(samples: readonly Sample[], base: string, label: string): ByLabel {
  const out: ByLabel = {};
  for (const s of samples) {
    const which = s.name === `${base}_count` ? "count" : s.name === `${base}_sum` ? "sum" : undefined;
    if (!which) continue;
    const k = s.labels[label] ?? "";
    const slot = (out[k] ??= { count: 0, sum: 0 });
    slot[which] += s.value;
  }
  return out;
}

/** What one process did between two scrapes: RPCs by method and database commands by command. */
export interface Activity {
  rpcs: ByLabel;
  commands: ByLabel;
}

/** RPCs by method and MongoDB commands by command from one scrape. */
export function activityOf(samples: readonly Sample[]): Activity {
  return { rpcs: histogramBy(samples, METRIC.rpcDuration, "method"), commands: histogramBy(samples, METRIC.mongoDuration, "command") };
}

/** after − before, per key (keys with no new observations left out). */
export function diffActivity(before: Activity, after: Activity): Activity {
  const diff = (a: ByLabel, b: ByLabel): ByLabel => {
    const out: ByLabel = {};
    for (const [k, v] of Object.entries(b)) {
      const count = v.count - (a[k]?.count ?? 0);
      if (count > 0) out[k] = { count, sum: v.sum - (a[k]?.sum ?? 0) };
    }
    return out;
  };
  return { rpcs: diff(before.rpcs, after.rpcs), commands: diff(before.commands, after.commands) };
}

/** Scrapes every named process at once. */
export async function scrapeAll(addresses: Record<string, string>): Promise<Record<string, Activity>> {
  const entries = await Promise.all(Object.entries(addresses).map(async ([k, a]) => [k, activityOf(await scrape(a))] as const));
  return Object.fromEntries(entries);
}
