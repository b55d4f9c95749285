/**
 * The console's call page and call search (issue 33 item 4, ADR 0032), in a real browser
 * against the real services: a call's story (begin, refusals naming it, the writes under its
 * key with both payload hashes, who settled it), call ids linked from the pending list and
 * the refusals, search by run, key and principal — behind sign-in, with every caller-chosen
 * value (run id, arguments, payloads, refusal fields, outcome detail) shown as text, and at
 * phone width without sideways scrolling.
 */
import { expect } from "chai";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import type { Browser, Page } from "playwright-core";
import { KernelClient, LedgerClient } from "../clients/ts/src";
import { chromiumPath, launchChromium, signInToConsole } from "./support/chromium";
import { refusal } from "./support/refusal";
import { serviceEnv, startService, type ServiceProcess } from "./support/processes";

const TOKEN = "console-call-test-admin-token-abcdefghij";
// Caller-chosen text, each trying to run script in the page.
const RUN = `run-<script>window.__xss=1</script>`;
const FIRST = `{"note":"<img src=x onerror=\\"window.__xss=2\\">"}`;
const SECOND = `{"note":"<script>window.__xss=3</script>","charged":250}`;
const BAD_KEY = `<svg onload="window.__xss=4">`;
const DETAIL = `<b onmouseover="window.__xss=5">charged</b>`;
const sha = (s: string): string => createHash("sha256").update(s).digest("hex");
/** KEYCAP_CONSOLE_SCREENSHOTS=docs writes the screenshots into docs/ (how docs/console-*.png are made). */
const SHOTS_DIR =
  process.env["KEYCAP_CONSOLE_SCREENSHOTS"] === "docs" ? path.resolve(process.cwd(), "docs") : fs.mkdtempSync(path.join(os.tmpdir(), "keycap-console-shots-"));

describe("web console: a call's story and call search (issue 33 item 4)", function () {
  this.timeout(120_000);
  let proc: ServiceProcess;
  let base = "";
  let kernel: KernelClient;
  let browser: Browser;
  let page: Page;
  let key = "";
  const dialogs: string[] = [];

  before(async function () {
    this.timeout(900_000);
    const executable = chromiumPath();
    proc = await startService("all", serviceEnv({ KEYCAP_ADMIN_TOKEN: TOKEN, KEYCAP_CONSOLE_LISTEN: "127.0.0.1:0" }));
    base = `http://${proc.endpoints.console!}`;
    kernel = new KernelClient(proc.endpoints.kernel!, { ledgerAddress: proc.endpoints.ledger!, coalesce: false });
    await kernel.registerTool({ id: "page.charge", effect: { kind: "idempotent", key: { fields: ["/order_id"] } } });
    const ledger = new LedgerClient(proc.endpoints.ledger!);
    const a = await kernel.beginCall("page.charge", '{"order_id":"P-1","memo":"<i>hi</i>"}', { callId: "page-a", runId: RUN });
    key = a.call!.key;
    expect((await refusal(ledger.writeWithCapability(a.capability, { key: BAD_KEY, payload: Buffer.from("x") }))).reason).to.equal("KEY_MISMATCH");
    await ledger.writeWithCapability(a.capability, { key, payload: Buffer.from(FIRST) });
    await kernel.completeCall("page-a", "succeeded", DETAIL);
    // The same order under another call id, with another payload: a payload mismatch.
    const b = await kernel.beginCall("page.charge", '{"order_id":"P-1","memo":"<i>hi</i>"}', { callId: "page-b", runId: RUN });
    expect(await ledger.writeWithCapability(b.capability, { key, payload: Buffer.from(SECOND) })).to.include({ payloadMismatch: true });
    ledger.close();
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

  async function noScriptRan(p: Page): Promise<void> {
    expect(await p.evaluate("typeof window.__xss")).to.equal("undefined");
    expect(await p.locator("main script, main img, main svg:not(.swatch):not(.plot), main b, main i").count()).to.equal(0);
    expect(dialogs).to.deep.equal([]);
  }

  it("refuses the call page and the search without a session (401, the sign-in form, nothing of the call)", async function () {
    for (const p of ["/call?id=page-a", `/calls/search?by=run&q=${encodeURIComponent(RUN)}`]) {
      const res = await fetch(`${base}${p}`, { redirect: "manual" });
      expect(res.status, p).to.equal(401);
      expect(res.headers.get("x-keycap-reason")).to.equal("CONSOLE_SESSION_MISSING");
      const body = await res.text();
      expect(body).to.include('name="token"').and.not.include(key).and.not.include("page.charge");
    }
  });

  it("tells a call's story: begin, the refusal naming it, both payload hashes under its key, who completed it — all as text", async function () {
    await signIn(page);
    await page.goto(`${base}/call?id=page-a`);
    expect(await page.locator("h1").textContent()).to.equal("Call page-a");
    const call = (await page.locator("section.call dl").textContent()) ?? "";
    expect(call).to.include(RUN).and.include("local-runtime").and.include(key).and.include("completed: succeeded").and.include(DETAIL);
    expect(await page.locator("section.call pre.payload").textContent()).to.equal('{"order_id":"P-1","memo":"<i>hi</i>"}');
    const events = await page.locator("ol.timeline li strong").allTextContents();
    expect(events).to.deep.equal(["begun", "refused", "write", "completed", "write"]);
    expect(await page.locator("ol.timeline li.completed").textContent()).to.include("succeeded by local-runtime");
    const refused = page.locator("table.rejections tbody tr");
    expect(await refused.count()).to.equal(1);
    expect(await refused.first().textContent())
      .to.include("KEY_MISMATCH")
      .and.include(BAD_KEY)
      .and.include(key);
    const writes = page.locator("table.writes tbody tr");
    expect(await writes.count()).to.equal(2);
    expect(await writes.nth(0).locator("td").nth(3).textContent()).to.equal(sha(FIRST));
    expect(await writes.nth(1).locator("td").nth(3).textContent()).to.equal(sha(SECOND));
    expect(await writes.nth(0).locator("pre").textContent()).to.equal(FIRST);
    expect(await writes.nth(1).locator("pre").textContent()).to.equal(SECOND);
    await noScriptRan(page);
    await page.screenshot({ path: path.join(SHOTS_DIR, "console-call.png"), fullPage: true });
    // The other call's id in the writes is a link to its story.
    await Promise.all([page.waitForURL(/\/call\?id=page-b$/), writes.nth(1).locator("a", { hasText: "page-b" }).click()]);
    expect(await page.locator("section.call dl").textContent()).to.include("pending");
  });

  it("finds calls by run, key and principal from the search box; each found call links to its story", async function () {
    await page.goto(`${base}/calls`);
    await page.selectOption("form.search select[name=by]", "run");
    await page.fill("form.search input[name=q]", RUN);
    await Promise.all([page.waitForURL(/\/calls\/search\?by=run&q=/), page.click("form.search button[type=submit]")]);
    expect(await page.locator("table.found tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-call")))).to.deep.equal(["page-b", "page-a"]);
    expect(await page.locator("table.found td.id").nth(2).textContent()).to.equal(RUN);
    await noScriptRan(page);
    await page.goto(`${base}/calls/search?by=key&q=${encodeURIComponent(key)}`);
    expect(await page.locator("table.found tbody tr").count()).to.equal(2);
    await page.goto(`${base}/calls/search?by=principal&q=local-runtime`);
    expect(await page.locator("table.found tbody tr").count()).to.equal(2);
    await Promise.all([page.waitForURL(/\/call\?id=page-a$/), page.locator("table.found a", { hasText: "page-a" }).click()]);
    expect(await page.locator("h1").textContent()).to.equal("Call page-a");
    // A value that cannot be a call id, and a call that does not exist, are said as such.
    const bad = await page.goto(`${base}/call?id=${encodeURIComponent("<script>x</script>")}`);
    expect(bad?.status()).to.equal(400);
    expect(await page.locator(".notice.error").textContent()).to.include("Not a call id");
    const missing = await page.goto(`${base}/call?id=page-nope`);
    expect(missing?.status()).to.equal(404);
    await noScriptRan(page);
  });

  it("links call ids to their story from the pending list and from a refusal's details", async function () {
    await page.goto(`${base}/calls`);
    const row = page.locator("table.pending tr[data-call='page-b']");
    await Promise.all([page.waitForURL(/\/call\?id=page-b$/), row.locator("a", { hasText: "page-b" }).click()]);
    await page.goto(`${base}/rejections?reason=KEY_MISMATCH`);
    const refused = page.locator("table.rejections tbody tr").first();
    await refused.locator("summary").click();
    await Promise.all([page.waitForURL(/\/call\?id=page-a$/), refused.locator("dl a", { hasText: "page-a" }).click()]);
    // The entry page lists the same two writes.
    await page.goto(`${base}/entries?key=${encodeURIComponent(key)}`);
    expect(await page.locator("section.entry table.writes tbody tr").count()).to.equal(2);
    await noScriptRan(page);
  });

  it("fits a phone: at 375 px the call page and the search never scroll sideways", async function () {
    const phone = await browser.newContext({ viewport: { width: 375, height: 740 }, deviceScaleFactor: 2, isMobile: true });
    try {
      const p = await phone.newPage();
      await signIn(p);
      for (const [route, shot] of [
        ["/call?id=page-a", "console-call-phone.png"],
        [`/calls/search?by=run&q=${encodeURIComponent(RUN)}`, ""],
      ] as const) {
        await p.goto(`${base}${route}`);
        const width = (await p.evaluate("document.documentElement.scrollWidth")) as number;
        expect(width, route).to.be.at.most(375);
        if (shot) await p.screenshot({ path: path.join(SHOTS_DIR, shot) });
      }
    } finally {
      await phone.close();
    }
  });
});
