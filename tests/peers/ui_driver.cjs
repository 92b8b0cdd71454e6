// Drives the gateway's /ui page in headless Chromium (the system's /usr/bin/chromium,
// through playwright-core; no browser is downloaded).
//
// Usage: node ui_driver.cjs PEERS_DIR URL BACKEND [SCREENSHOT.png]
// Prints one JSON line when the page has loaded and its live stream is connected:
//   {"step":"loaded","main":"<main>'s HTML","advertised":"<summary count>","toolRows":N}
// then waits (up to 60 s, polling the DOM, never reloading) until BACKEND's row shows
// `unhealthy`, and prints {"step":"unhealthy","main":...,"reloaded":bool,"errors":[...]}
// (`errors`: console errors, which is where CSP violations show). Exit status 0 unless
// the browser could not be driven. BACKEND "-" stops after the first step. With
// $VMCP_UI_TOKEN set, every request (the page and its event stream) carries it as a
// bearer token, as a proxy in front of the page would add it.
"use strict";
const path = require("path");
const [peers, url, backend, screenshot] = process.argv.slice(2);
const { chromium } = require(path.join(peers, "node/node_modules/playwright-core"));

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
      "--no-first-run", "--disable-background-networking", "--disable-component-update",
      "--disable-sync"],
  });
  try {
    const token = process.env.VMCP_UI_TOKEN;
    const page = await browser.newPage({
      viewport: { width: 1200, height: 900 },
      extraHTTPHeaders: token ? { Authorization: `Bearer ${token}` } : {},
    });
    const errors = [];
    page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(url, { waitUntil: "load" });
    await page.waitForSelector("#live.on", { timeout: 30000 });
    await page.evaluate(() => { window.__sameDocument = true; });
    const main = () => page.$eval("#main", (m) => m.innerHTML);
    // The summary's advertised count, and the tool rows not hidden by a filter.
    const advertised = await page.$eval("#advertised", (b) => b.textContent.trim());
    const toolRows = await page.$$eval("#tools tbody tr",
      (rows) => rows.filter((r) => !r.textContent.includes("hidden by filter")).length);
    console.log(JSON.stringify({ step: "loaded", main: await main(), advertised, toolRows, errors }));
    if (backend === "-") return;
    await page.waitForSelector(`tr[data-backend="${backend}"][data-health="unhealthy"]`,
      { timeout: 60000, polling: 100 });
    const reloaded = !(await page.evaluate(() => window.__sameDocument === true));
    if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });
    console.log(JSON.stringify({ step: "unhealthy", main: await main(), reloaded, errors }));
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
