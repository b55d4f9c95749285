/**
 * Crash-injection points for the torture and crash tests (issue 15): with
 * KEYCAP_TEST_FAULT_POINTS=<name>[,<name>…] the process SIGKILLs itself when it
 * reaches a named point, so a test can stop it exactly between two writes. A
 * `<name>@<n>` entry fires on the n-th hit only. Unset (every deployment), a
 * point costs one map lookup and does nothing.
 */
const ENV = "KEYCAP_TEST_FAULT_POINTS";

function parse(raw: string | undefined): Map<string, number> {
  const points = new Map<string, number>();
  for (const part of (raw ?? "")
    .split(",")
    .map((p) => p.trim())
    .filter(Boolean)) {
    const [name, nth] = part.split("@") as [string, string | undefined];
    points.set(name, nth === undefined ? 1 : Math.max(1, Number.parseInt(nth, 10) || 1));
  }
  return points;
}

const armed = parse(process.env[ENV]);
const hits = new Map<string, number>();

/** Names of the points the services expose (tests refer to these). */
export type FaultPoint = "journal.begin.before-journal" | "journal.begin.after-journal" | "journal.indeterminate.after-mark" | "ledger.write.after-spend";

/** Kills this process here when the test setting arms `name`. */
export function faultPoint(name: FaultPoint): void {
  const nth = armed.get(name);
  if (nth === undefined) return;
  const n = (hits.get(name) ?? 0) + 1;
  hits.set(name, n);
  if (n === nth) {
    process.stderr.write(`keycap: fault point ${name} reached (${ENV}); killing this process\n`);
    process.kill(process.pid, "SIGKILL");
  }
}
