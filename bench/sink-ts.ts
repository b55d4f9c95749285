/**
 * Sink-side cost per request, TypeScript SDK (issue 12): one handler (builds its JSON
 * answer from the request's key) run unprotected and behind `Sink.admit` with the same
 * idempotent capability, interleaved in one process, one request at a time. Prints ONE JSON
 * line like the Python and Go programs: {language, requests, protected_per_s,
 * unprotected_per_s, ratio, verify_us_per_request, how}.
 *
 * Usage: node dist/bench/sink-ts.js [seconds]
 */
import { createPrivateKey, sign } from "node:crypto";
import * as fs from "node:fs";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import * as path from "node:path";
import { projectRoot } from "../services/common/src/repo-paths";
import { RemoteJwksSource } from "../services/capability/src";
import { capabilityOf, protectHttp, Sink } from "../services/sink/src";

interface VectorKey {
  kty: string;
  crv: string;
  x: string;
  d: string;
  kid: string;
}

const b64 = (v: unknown): string => Buffer.from(JSON.stringify(v)).toString("base64url");

function capability(key: VectorKey): string {
  const now = Math.floor(Date.now() / 1000);
  const header = { alg: "EdDSA", typ: "keycap-capability+jwt", kid: key.kid };
  const claims = {
    iss: "keycap-kernel",
    aud: "keycap-ledger",
    sub: "bench-runtime",
    tool_id: "bench.charge",
    effect: "idempotent",
    call_id: "3f1c2a9e-7d44-4c1b-9a0e-5b8f6d2c1e01",
    attempt: 1,
    jti: "9b2e4f6a-1c3d-4e5f-8a7b-0c1d2e3f4a01",
    key: "Qm9yZGVyLTEwMjQ6c2hhMjU2LWtleS1kZXJpdmVkLWJlbmNobWFyaw",
    iat: now,
    exp: now + 600,
  };
  const input = `${b64(header)}.${b64(claims)}`;
  const pk = createPrivateKey({ key: { kty: key.kty, crv: key.crv, x: key.x, d: key.d }, format: "jwk" });
  return `${input}.${sign(null, Buffer.from(input), pk).toString("base64url")}`;
}

function handler(key: string): string {
  return JSON.stringify({ charged: true, key });
}

async function listen(server: http.Server): Promise<number> {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return (server.address() as AddressInfo).port;
}

/** The same handler served over HTTP, bare and behind protectHttp; requests/s of each. */
async function httpRatio(sink: Sink, authorization: string, seconds: number): Promise<{ protectedPerS: number; unprotectedPerS: number }> {
  const bare = http.createServer((_req, res) => void res.end(handler("none")));
  const guarded = http.createServer(protectHttp(sink, (req, res) => void res.end(handler(capabilityOf(req).key ?? ""))));
  const [bp, gp] = [await listen(bare), await listen(guarded)];
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const get = (port: number): Promise<void> =>
    new Promise((resolve, reject) => {
      const req = http.request({ host: "127.0.0.1", port, method: "POST", path: "/charges", agent, headers: { authorization } }, (res) => {
        res.resume();
        res.on("end", () => (res.statusCode === 200 ? resolve() : reject(new Error(`status ${res.statusCode}`))));
      });
      req.on("error", reject);
      req.end();
    });
  const run = async (port: number, ms: number): Promise<{ n: number; s: number }> => {
    const t0 = Date.now();
    let n = 0;
    while (Date.now() - t0 < ms) {
      await get(port);
      n++;
    }
    return { n, s: (Date.now() - t0) / 1000 };
  };
  await run(bp, 200);
  await run(gp, 200);
  const t = { p: { n: 0, s: 0 }, u: { n: 0, s: 0 } };
  for (let r = 0; r < 5; r++) {
    const u = await run(bp, (seconds * 1000) / 10);
    const p = await run(gp, (seconds * 1000) / 10);
    t.u.n += u.n;
    t.u.s += u.s;
    t.p.n += p.n;
    t.p.s += p.s;
  }
  agent.destroy();
  await Promise.all([new Promise((r) => bare.close(r)), new Promise((r) => guarded.close(r))]);
  return { protectedPerS: t.p.n / t.p.s, unprotectedPerS: t.u.n / t.u.s };
}

async function main(): Promise<void> {
  const seconds = Number(process.argv[2] ?? 3);
  const vectors = JSON.parse(fs.readFileSync(path.join(projectRoot(), "test/vectors/capability-verification.json"), "utf8")) as {
    keys: Record<string, VectorKey>;
  };
  const key = vectors.keys["kernel-current"]!;
  const { d: _private, ...publicKey } = key;
  const jwks = JSON.stringify({ keys: [{ ...publicKey, alg: "EdDSA", use: "sig" }] });
  const sink = new Sink({ name: "bench", tools: ["bench.charge"], keys: new RemoteJwksSource(() => Promise.resolve(jwks)) });
  const authorization = `Bearer ${capability(key)}`;
  const context = { method: "HTTP POST /charges", peer: "127.0.0.1:1" };
  let sinkOut = 0;

  const unprotected = async (): Promise<void> => {
    sinkOut += handler(context.method).length;
    await Promise.resolve();
  };
  const protectedCall = async (): Promise<void> => {
    const cap = await sink.admit(authorization, context);
    sinkOut += handler(cap.key ?? "").length;
  };
  const run = async (fn: () => Promise<void>, ms: number): Promise<{ n: number; s: number }> => {
    const t0 = process.hrtime.bigint();
    const end = Number(t0) / 1e6 + ms;
    let n = 0;
    while (n % 256 !== 0 || Number(process.hrtime.bigint()) / 1e6 < end) {
      await fn();
      n++;
    }
    return { n, s: Number(process.hrtime.bigint() - t0) / 1e9 };
  };
  await run(protectedCall, 200);
  await run(unprotected, 200);
  // Interleaved repetitions, so drift on a shared machine hits both sides alike.
  const reps = 5;
  const totals = { p: { n: 0, s: 0 }, u: { n: 0, s: 0 } };
  for (let r = 0; r < reps; r++) {
    const u = await run(unprotected, (seconds * 1000) / reps / 2);
    const p = await run(protectedCall, (seconds * 1000) / reps / 2);
    totals.u.n += u.n;
    totals.u.s += u.s;
    totals.p.n += p.n;
    totals.p.s += p.s;
  }
  const overHttp = await httpRatio(sink, authorization, seconds);
  const protectedPerS = totals.p.n / totals.p.s;
  const unprotectedPerS = totals.u.n / totals.u.s;
  process.stdout.write(
    JSON.stringify({
      language: "typescript",
      requests: totals.p.n + totals.u.n,
      protected_per_s: protectedPerS,
      unprotected_per_s: unprotectedPerS,
      ratio: protectedPerS / unprotectedPerS,
      verify_us_per_request: 1e6 / protectedPerS - 1e6 / unprotectedPerS,
      how: "in process: Sink.admit (the ledger's verifier + allow-list) then the handler, vs the handler alone; one at a time",
      http_protected_per_s: overHttp.protectedPerS,
      http_unprotected_per_s: overHttp.unprotectedPerS,
      http_ratio: overHttp.protectedPerS / overHttp.unprotectedPerS,
      http_how: "node:http on loopback, keep-alive, one request at a time, client in the same process: protectHttp(handler) vs handler",
      checksum: sinkOut,
    }) + "\n",
  );
}

void main().catch((err: unknown) => {
  process.stderr.write(`sink-ts: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
