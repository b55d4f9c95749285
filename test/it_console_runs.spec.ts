/**
 * The console's run page (issue 30, ADR 0028), in a real browser against the real services:
 * a recorded live run, its replay and a shadow run, each listed in the order its calls were
 * begun with position, tool, key, outcome and mode, linked to the tool, the entry, the call and
 * the run replayed — behind sign-in, a caller-chosen run id shown as text, at phone width
 * without sideways scrolling.
 */
import { expect } from "chai";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import type { Browser, Page } from "playwright-core";
import { KernelClient, Runtime } from "../clients/ts/src";
import { charge, notify, tools, transfer } from "./support/acceptance-tools";
import { chromiumPath, launchChromium, signInToConsole } from "./support/chromium";
import { refusal } from "./support/refusal";
import { serviceEnv, startService, type ServiceProcess } from "./support/processes";

const TOKEN = "console-runs-test-admin-token-abcdefghij";
const RECORDED = "rec-<script>window.__xss=1</script>";
/** KEYCAP_CONSOLE_SCREENSHOTS=docs writes the screenshots into docs/ (how docs/console-*.png are made). */
const SHOTS_DIR =
  process.env["KEYCAP_CONSOLE_SCREENSHOTS"] === "docs" ? path.resolve(process.cwd(), "docs") : fs.mkdtempSync(path.join(os.tmpdir(), "keycap-console-shots-"));

describe("web console: a run's calls in order, live, replay and shadow (issue 30)", function () {
  this.timeout(120_000);
  let proc: ServiceProcess;
  let base = "";
  let kernel: KernelClient;
  let browser: Browser;
  let page: Page;
  const recordedCalls: string[] = [];
  const dialogs: string[] = [];
  const steps = [
    { tool: charge.id, args: { order_id: "R-1", amount_cents: 1200 } },
    { tool: notify.id, args: { request_id: "RN-1", text: "shipped" } },
    { tool: charge.id, args: { order_id: "R-2", amount_cents: 300 } },
  ];

  before(async function () {
    this.timeout(900_000);
    const executable = chromiumPath();
    proc = await startService("all", serviceEnv({ KEYCAP_ADMIN_TOKEN: TOKEN, KEYCAP_CONSOLE_LISTEN: "127.0.0.1:0" }));
    base = `http://${proc.endpoints.console!}`;
    kernel = new KernelClient(proc.endpoints.kernel!, { ledgerAddress: proc.endpoints.ledger! });
    const live = new Runtime(kernel, tools);
    await live.registerAll();
    for (const s of steps) recordedCalls.push((await live.run(s.tool, s.args, { runId: RECORDED })).handle.callId);
    const replay = new Runtime(kernel, tools, { mode: "replay", replayOf: RECORDED });
    for (const s of steps) await replay.run(s.tool, s.args, { runId: "rec-replay" });
    const shadow = new Runtime(kernel, tools, { mode: "shadow", shadows: RECORDED });
    await shadow.run(charge.id, { order_id: "S-1", amount_cents: 5 }, { runId: "rec-shadow" });
    expect((await refusal(shadow.run(transfer.id, { to: "acct-1", amount_cents: 1 }, { runId: "rec-shadow" }))).reason).to.equal("SANDBOX_UNSAFE_DENIED");
    browser = await launchChromium(executable);
    page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
    page.on("dialog", (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
  });

  after(async function () {
    await browser?.close().catch(() => undefined);
    kernel?.close();
    await proc?.stop("SIGKILL").catch(() => undefined);
  });

  const signIn = (p: Page): Promise<void> => signInToConsole(p, base, TOKEN);

  const rowsOf = async (p: Page): Promise<string[][]> =>
    p.locator("table.run tbody tr").evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll("td")].map((td) => td.textContent?.trim() ?? "")));

  it("refuses the run page without a session (401, the sign-in form, nothing of the run)", async function () {
    const res = await fetch(`${base}/run?id=${encodeURIComponent(RECORDED)}`, { redirect: "manual" });
    expect(res.status).to.equal(401);
    expect(res.headers.get("x-keycap-reason")).to.equal("CONSOLE_SESSION_MISSING");
    expect(await res.text())
      .to.include('name="token"')
      .and.not.include(recordedCalls[0]!);
  });

  it("lists a recorded run's calls in order, with the run id shown as text and every call linked", async function () {
    await signIn(page);
    await Promise.all([page.waitForNavigation(), page.click("nav a:text('Runs')")]);
    await page.fill("input[name=id]", RECORDED);
    await Promise.all([page.waitForNavigation(), page.click("form.search button[type=submit]")]);
    expect(await page.locator("h1").textContent()).to.equal(`Run ${RECORDED}`);
    const rows = await rowsOf(page);
    expect(rows.map((r) => [r[0], r[1], r[3], r[4], r[6]])).to.deep.equal(steps.map((s, i) => [String(i), s.tool, "succeeded", "live", recordedCalls[i]]));
    expect(rows[1]![2]).to.equal("RN-1");
    const callHref = await page.locator("table.run tbody tr").first().locator("td").nth(6).locator("a").getAttribute("href");
    expect(callHref).to.equal(`/call?id=${recordedCalls[0]}`);
    expect(await page.evaluate("typeof window.__xss")).to.equal("undefined");
    expect(await page.locator("main script").count()).to.equal(0);
    expect(dialogs).to.deep.equal([]);
  });

  it("lists a replay against the run it replays and a shadow run's calls with their mode; the denied Unsafe call is not a call", async function () {
    await page.goto(`${base}/run?id=rec-replay`);
    const replay = await rowsOf(page);
    expect(replay.map((r) => [r[0], r[1], r[4], r[5]])).to.deep.equal(steps.map((s, i) => [String(i), s.tool, "replay", RECORDED]));
    await page.screenshot({ path: path.join(SHOTS_DIR, "console-run.png") });
    await Promise.all([page.waitForNavigation(), page.locator("table.run tbody tr").first().locator("td").nth(5).locator("a").click()]);
    expect(await page.locator("h1").textContent()).to.equal(`Run ${RECORDED}`);
    await page.goto(`${base}/run?id=rec-shadow`);
    expect((await rowsOf(page)).map((r) => [r[1], r[4], r[5]])).to.deep.equal([[charge.id, "shadow", RECORDED]]);
    await page.goto(`${base}/run?id=no-such-run`);
    expect(await page.locator("p.empty").textContent()).to.equal("No calls in this run.");
  });

  it("answers a run id the kernel refuses with 400 and the reason, and fits a phone", async function () {
    const res = await page.goto(`${base}/run?id=${"r".repeat(257)}`);
    expect(res?.status()).to.equal(400);
    expect(await page.locator("p.notice.error").textContent()).to.include("run_id");
    const phone = await browser.newContext({ viewport: { width: 375, height: 740 }, deviceScaleFactor: 2, isMobile: true });
    try {
      const p = await phone.newPage();
      await signIn(p);
      await p.goto(`${base}/run?id=rec-replay`);
      expect((await p.evaluate("document.documentElement.scrollWidth")) as number).to.be.at.most(375);
    } finally {
      await phone.close();
    }
  });
});
