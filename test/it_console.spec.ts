import { expect } from "chai";
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as readline from "node:readline";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { AdminClient, KernelClient, KeycapClientError, LedgerClient, Runtime } from "../clients/ts/src";
import { ResumeAction } from "../gen/ts/keycap/kernel/v1/kernel";
import { chromiumPath, launchChromium, signInToConsole } from "./support/chromium";
import { capabilityHeader, foreignKey, idempotentClaims, signEd25519 } from "./support/ledger-harness";
import { CLI_ENTRY, serviceEnv, startService, type ServiceProcess } from "./support/processes";

async function waitFor(cond: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 50));
  }
}

const TOKEN = "console-test-admin-token-abcdefghijklmnop";
const SCRIPT_TOOL = `<script>window.__xss=1</script><img src=x onerror="window.__xss=2">`;
const PAYLOAD = `{"note":"<b>bold?</b><script>window.__xss=3</script>"}`;
/** KEYCAP_CONSOLE_SCREENSHOTS=docs writes the screenshots into docs/ (how docs/console-*.png are made). */
const SHOTS_DIR =
  process.env["KEYCAP_CONSOLE_SCREENSHOTS"] === "docs" ? path.resolve(process.cwd(), "docs") : fs.mkdtempSync(path.join(os.tmpdir(), "keycap-console-shots-"));

describe("web console: operators read and settle through the browser, behind the admin credential", function () {
  this.timeout(120_000);
  let proc: ServiceProcess;
  let base = "";
  let kernel: KernelClient;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  let entryKey = "";
  const dialogs: string[] = [];

  before(async function () {
    this.timeout(900_000);
    const executable = chromiumPath();
    proc = await startService("all", serviceEnv({ KEYCAP_ADMIN_TOKEN: TOKEN, KEYCAP_CONSOLE_LISTEN: "127.0.0.1:0" }));
    expect(proc.endpoints.console, "serve all starts the console when KEYCAP_CONSOLE_LISTEN is set").to.be.a("string");
    base = `http://${proc.endpoints.console!}`;

    kernel = new KernelClient(proc.endpoints.kernel!, { ledgerAddress: proc.endpoints.ledger! });
    await kernel.registerTool({ id: "console.charge", effect: { kind: "idempotent", key: { fields: ["/order_id"] } } });
    await kernel.registerTool({ id: "console.transfer", effect: { kind: "unsafe" } });
    // An entry whose payload is markup.
    const h = await kernel.begin("console.charge", { order_id: "K-1" });
    entryKey = h.key;
    await h.write(PAYLOAD);
    await kernel.completeCall(h.callId, "succeeded");
    // A refusal under console.charge: a valid capability, a key that is not the kernel's.
    const ledger = new LedgerClient(proc.endpoints.ledger!);
    const begun = await kernel.beginCall("console.charge", '{"order_id":"K-2"}');
    const mismatch = await ledger
      .writeWithCapability(begun.capability, { key: "not-the-kernels-key", payload: Buffer.from("x") })
      .catch((e: unknown) => KeycapClientError.from(e));
    expect((mismatch as KeycapClientError).reason).to.equal("KEY_MISMATCH");
    await kernel.completeCall(begun.call!.callId, "failed");
    // A forged capability whose claimed tool id is markup: recorded as claimed (unverified).
    const kid = (await kernel.signingKeys()).currentKeyId;
    const forged = signEd25519(capabilityHeader(kid), idempotentClaims(SCRIPT_TOOL, "k1"), foreignKey());
    const bad = await ledger.writeWithCapability(forged, { key: "k1", payload: Buffer.from("x") }).catch((e: unknown) => KeycapClientError.from(e));
    expect((bad as KeycapClientError).reason).to.equal("BAD_SIGNATURE");
    ledger.close();
    // An Unsafe call left unfinished, then found by recovery: indeterminate.
    await kernel.beginCall("console.transfer", '{"amount":9}', { callId: "console-u-1" });
    const steps = await new Runtime(kernel, []).recover({ toolIds: ["console.transfer"], includeUnknownTools: true });
    expect(steps.find((s) => s.callId === "console-u-1")?.result).to.equal("indeterminate");

    browser = await launchChromium(executable);
    context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    page = await context.newPage();
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

  it("refuses every page and action without a session (401 with the sign-in form), and a wrong credential", async function () {
    for (const p of ["/", "/rejections", `/entries?key=${encodeURIComponent(entryKey)}`, "/calls", "/nope"]) {
      const res = await fetch(`${base}${p}`, { redirect: "manual" });
      expect(res.status, p).to.equal(401);
      expect(res.headers.get("x-keycap-reason")).to.equal("CONSOLE_SESSION_MISSING");
      const body = await res.text();
      expect(body).to.include('name="token"');
      expect(body).to.not.include(entryKey);
    }
    const settle = await fetch(`${base}/calls/settle/confirm`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: "call_id=console-u-1&outcome=failed&confirm=yes",
    });
    expect(settle.status).to.equal(401);
    expect((await kernel.listIndeterminateCalls("console.transfer")).map((c) => c.callId)).to.include("console-u-1");

    const wrong = await fetch(`${base}/signin`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: "token=not-the-admin-credential",
      redirect: "manual",
    });
    expect(wrong.status).to.equal(401);
    expect(wrong.headers.get("set-cookie") ?? "").to.not.match(/keycap_console=[^;]/);
    // A runtime principal's credential is not the admin credential either.
    const runtime = await fetch(`${base}/signin`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: `token=${encodeURIComponent(process.env["KEYCAP_RUNTIME_TOKEN"] ?? "")}`,
      redirect: "manual",
    });
    expect(runtime.status).to.equal(401);
  });

  it("signs in with the admin credential into an HttpOnly, SameSite=Strict session, under a CSP that allows no script", async function () {
    const res = await fetch(`${base}/signin`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: `token=${TOKEN}`,
      redirect: "manual",
    });
    expect(res.status).to.equal(303);
    const cookie = res.headers.get("set-cookie") ?? "";
    expect(cookie).to.match(/^keycap_console=[A-Za-z0-9_-]{43};/);
    expect(cookie).to.include("HttpOnly").and.include("SameSite=Strict");
    expect(cookie).to.not.include(TOKEN);
    const home = await fetch(`${base}/`, { headers: { cookie: cookie.split(";")[0]! } });
    expect(home.status).to.equal(200);
    const csp = home.headers.get("content-security-policy") ?? "";
    expect(csp).to.include("default-src 'none'").and.not.include("script-src").and.not.include("unsafe-inline");
    expect(await home.text()).to.not.match(/<script/i);
    // A form post with the session but without its CSRF token is refused.
    const forged = await fetch(`${base}/calls/settle/confirm`, {
      method: "POST",
      headers: { cookie: cookie.split(";")[0]!, "content-type": "application/x-www-form-urlencoded" },
      body: "call_id=console-u-1&outcome=failed&confirm=yes",
    });
    expect(forged.status).to.equal(403);
    expect(forged.headers.get("x-keycap-reason")).to.equal("CONSOLE_CSRF_INVALID");
    expect((await kernel.listIndeterminateCalls("console.transfer")).map((c) => c.callId)).to.include("console-u-1");
  });

  it("in the browser: signs in, shows the refusal the test made under its tool, and lists it", async function () {
    await signIn(page);
    const row = page.locator("table.tools tr", { hasText: "console.charge" });
    expect(await row.locator("td").nth(5).textContent()).to.equal("1");
    const admin = new AdminClient(proc.endpoints.admin!, TOKEN);
    const stats = await admin.stats();
    admin.close();
    expect(await page.locator("section.cards .card").nth(3).textContent()).to.equal(`${stats.rejections} refusals`);
    // Recovery handing the Unsafe call to an operator is recorded (UNSAFE_NOT_RESUMABLE) but refused no call: not in the chart.
    const handoffs = Number(stats.rejectionsByReason["UNSAFE_NOT_RESUMABLE"] ?? 0);
    expect(handoffs).to.be.greaterThan(0);
    expect(await page.locator("figure.chart figcaption").textContent()).to.equal(`All refusals, last 24h: ${Number(stats.rejections) - handoffs} refusals`);
    expect(await page.locator("figure.chart rect").count()).to.be.greaterThan(0);
    await page.screenshot({ path: path.join(SHOTS_DIR, "console-overview.png") });
    await Promise.all([page.waitForURL(/\/rejections\?tool=console\.charge$/), row.locator("td").nth(5).locator("a").click()]);
    const rows = page.locator("table.rejections tbody tr");
    expect(await rows.count()).to.equal(1);
    expect(await rows.first().textContent())
      .to.include("KEY_MISMATCH")
      .and.include("PERMISSION_DENIED");
    await rows.first().locator("summary").click();
    expect(await rows.first().locator("dl").textContent()).to.include("not-the-kernels-key");
  });

  it("filters refusals by reason, and shows a tool id holding <script> as text without running it", async function () {
    await page.goto(`${base}/rejections`);
    // The service field takes any service, sinks included, and suggests the known ones.
    const suggested = await page.locator("datalist#services option").evaluateAll((os) => os.map((o) => o.getAttribute("value") ?? ""));
    expect(suggested).to.include.members(["kernel", "ledger", "mcp", "sink:gateway"]);
    await page.selectOption("select[name=reason]", "BAD_SIGNATURE");
    await Promise.all([page.waitForURL(/reason=BAD_SIGNATURE/), page.click("form.filters button[type=submit]")]);
    const rows = page.locator("table.rejections tbody tr");
    expect(await rows.count()).to.equal(1);
    expect(await rows.first().locator("td").nth(3).textContent()).to.equal("BAD_SIGNATURE");
    const toolCell = rows.first().locator("td.id");
    expect(await toolCell.textContent()).to.equal(`${SCRIPT_TOOL} unverified`);
    // Every tool id links to the tool's page (issue 33), the markup in it encoded into the link.
    expect(await toolCell.locator("a").getAttribute("href")).to.equal(`/?${new URLSearchParams({ tool: SCRIPT_TOOL }).toString()}`);
    expect(await page.locator("main script, main img").count()).to.equal(0);
    await page.screenshot({ path: path.join(SHOTS_DIR, "console-refusals.png") });
    // The overview names the same tool, as text too.
    await page.goto(`${base}/`);
    expect(await page.locator("table.tools td.id", { hasText: "<script>" }).textContent()).to.equal(SCRIPT_TOOL);
    expect(await page.evaluate("typeof window.__xss")).to.equal("undefined");
    expect(await page.locator("script").count()).to.equal(0);
    expect(dialogs).to.deep.equal([]);
  });

  it("shows a tool's registered definition on its page: effect class, key fields, owner (issue 33 item 2)", async function () {
    await page.goto(`${base}/?tool=console.charge`);
    const definition = page.locator("section.definition dl");
    const text = (await definition.textContent()) ?? "";
    expect(text).to.include("idempotent").and.include("/order_id").and.include("key fields");
    await page.screenshot({ path: path.join(SHOTS_DIR, "console-tool.png") });
    await page.goto(`${base}/?tool=console.transfer`);
    expect(await page.locator("section.definition dl").textContent())
      .to.include("unsafe")
      .and.not.include("key fields");
    // A tool the kernel does not know (refusals can name any id) has no definition to show.
    await page.goto(`${base}/?tool=${encodeURIComponent("no.such.tool")}`);
    expect(await page.locator("section.definition").count()).to.equal(0);
  });

  it("opens an entry by its key, payload shown as text", async function () {
    await page.goto(`${base}/entries`);
    await page.fill("input[name=key]", entryKey);
    await Promise.all([page.waitForURL(/key=/), page.click("form.filters button[type=submit] >> nth=0")]);
    const entry = page.locator("section.entry");
    expect(await entry.locator("dl").textContent())
      .to.include(entryKey)
      .and.include("console.charge");
    expect(await entry.locator("pre.payload").textContent()).to.equal(PAYLOAD);
    expect(await page.evaluate("typeof window.__xss")).to.equal("undefined");
    await page.screenshot({ path: path.join(SHOTS_DIR, "console-entry.png") });
    await page.goto(`${base}/entries?key=not-a-key`);
    expect(await page.locator(".notice.error").textContent()).to.include("No entry under this key");
    // The entries list links each tool id to the tool's page (issue 33).
    await page.goto(`${base}/entries`);
    expect(await page.locator("table.entries td.id a", { hasText: "console.charge" }).first().getAttribute("href")).to.equal("/?tool=console.charge");
  });

  it("settles an indeterminate call after a confirmation step, and records who and when with the call", async function () {
    await page.goto(`${base}/calls`);
    const row = page.locator("table.indeterminate tr[data-call='console-u-1']");
    expect(await row.count()).to.equal(1);
    await page.screenshot({ path: path.join(SHOTS_DIR, "console-calls.png") });
    await row.locator("select[name=outcome]").selectOption("failed");
    await row.locator("input[name=detail]").fill("checked the bank: no transfer");
    await Promise.all([page.waitForURL(`${base}/calls/settle`), row.locator("button").click()]);
    // Not settled yet: the confirmation page only.
    expect(await page.locator("h1").textContent()).to.equal("Confirm settlement");
    expect((await kernel.listIndeterminateCalls("console.transfer")).map((c) => c.callId)).to.include("console-u-1");
    await page.screenshot({ path: path.join(SHOTS_DIR, "console-settle-confirm.png") });
    await Promise.all([page.waitForURL(`${base}/calls/settle/confirm`), page.click("form.confirm button[value=yes]")]);
    expect(await page.locator(".notice.ok").textContent()).to.equal("Call console-u-1 settled as failed.");
    const shown = (await page.locator("main dl").textContent()) ?? "";
    expect(shown).to.include("settled by").and.include("admin (keycap console").and.include("checked the bank: no transfer");
    expect((await kernel.listIndeterminateCalls("console.transfer")).map((c) => c.callId)).to.not.include("console-u-1");
    expect((await kernel.resumeCall("console-u-1")).action).to.equal(ResumeAction.RESUME_ACTION_ALREADY_COMPLETED);
    expect(proc.output()).to.match(/"msg":"console settled a call"/);
  });

  it("fits a phone: at 375 px the page never scrolls sideways (tables scroll inside their box)", async function () {
    const phone = await browser.newContext({ viewport: { width: 375, height: 740 }, deviceScaleFactor: 2, isMobile: true });
    try {
      const p = await phone.newPage();
      await signIn(p);
      for (const [route, shot] of [
        ["/", "console-overview-phone.png"],
        ["/rejections", "console-refusals-phone.png"],
        ["/calls", ""],
        [`/entries?key=${encodeURIComponent(entryKey)}`, ""],
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

  it("keycap serve all prints the console's address; keycap console serves it alone beside services elsewhere", async function () {
    expect(proc.output()).to.include(`open the console at http://${proc.endpoints.console!}/`);
    const child = spawn(process.execPath, [CLI_ENTRY, "console"], {
      env: {
        PATH: process.env["PATH"] ?? "",
        HOME: process.env["HOME"] ?? "",
        KEYCAP_CONSOLE_LISTEN: "127.0.0.1:0",
        KEYCAP_ADMIN_ADDRESS: proc.endpoints.admin!,
        KEYCAP_KERNEL_ADDRESS: proc.endpoints.kernel!,
        KEYCAP_DATA_DIR: proc.env["KEYCAP_DATA_DIR"]!,
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    try {
      let stderr = "";
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
      const address = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`keycap console not ready:\n${stderr}`)), 20_000);
        readline.createInterface({ input: child.stdout }).on("line", (line) => {
          const rec = JSON.parse(line) as { msg?: string; endpoints?: { address: string }[] };
          if (rec.msg === "ready" && rec.endpoints?.[0]) {
            clearTimeout(timer);
            resolve(rec.endpoints[0].address);
          }
        });
      });
      expect((await fetch(`http://${address}/calls`)).status).to.equal(401);
      const signedIn = await fetch(`http://${address}/signin`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: `token=${TOKEN}`,
        redirect: "manual",
      });
      expect(signedIn.status).to.equal(303);
      const page = await fetch(`http://${address}/rejections?tool=console.charge`, {
        headers: { cookie: (signedIn.headers.get("set-cookie") ?? "").split(";")[0]! },
      });
      expect(page.status).to.equal(200);
      expect(await page.text()).to.include("KEY_MISMATCH");
      await waitFor(() => stderr.includes(`keycap console at http://${address}/`));
    } finally {
      child.kill("SIGTERM");
    }
  });

  it("signing out ends the session", async function () {
    await page.goto(`${base}/`);
    await Promise.all([page.waitForURL(`${base}/signin`), page.click("form.signout button")]);
    const res = await page.goto(`${base}/calls`);
    expect(res?.status()).to.equal(401);
  });
});
