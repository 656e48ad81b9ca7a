// Opens the built documentation site in Debian's headless Chromium (playwright-core) for
// deploy/local/docs-site.sh, served over HTTP on loopback as a reader gets it: every page of the
// sidebar loads without a script error and shows its title, and a screenshot of the first page
// is kept.
//
//   node site.mjs <site base URL> <screenshot.png>
import { chromium } from 'playwright-core';

const [site, shot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const failures = [];
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(`${page.url()}: ${e}`));
  // A request the next navigation aborts (a favicon) is not a failure; any other is, and a
  // request outside the site is one (the site fetches nothing from elsewhere).
  page.on('requestfailed', (r) => {
    if (r.failure()?.errorText !== 'net::ERR_ABORTED') errors.push(`${page.url()}: ${r.url()} failed (${r.failure()?.errorText})`);
  });
  page.on('request', (r) => {
    if (!r.url().startsWith(new URL(site).origin) && !r.url().startsWith('data:')) errors.push(`${page.url()}: fetched ${r.url()}`);
  });
  await page.goto(new URL('index.html', site).href);
  await page.waitForSelector('#mdbook-sidebar a, .sidebar a, nav a', { timeout: 15000 });
  const links = await page.evaluate(() =>
    [...document.querySelectorAll('#mdbook-sidebar a[href], .sidebar a[href], .chapter a[href]')]
      .map((a) => a.href).filter((h) => h.startsWith(location.origin)));
  const pages = [...new Set(links.map((h) => h.split('#')[0]))];
  if (pages.length < 5) failures.push(`the sidebar lists ${pages.length} pages`);
  await page.screenshot({ path: shot, fullPage: false });
  for (const url of pages) {
    await page.goto(url);
    const title = await page.evaluate(() => document.querySelector('main h1')?.textContent ?? '');
    if (!title.trim()) failures.push(`${url}: no title`);
  }
  if (errors.length) failures.push(`script errors: ${errors.join('; ')}`);
  console.log(`opened ${pages.length} pages; screenshot ${shot}`);
} finally {
  await browser.close();
}
if (failures.length) {
  console.error(`FAIL ${failures.join('\n')}`);
  process.exit(1);
}
