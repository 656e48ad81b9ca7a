// Drives `wasmpilot dashboard` in Debian's headless Chromium (playwright-core, no bundled
// browser) for host/tests/e2e_dashboard.rs, which sends one command a line on stdin (JSON):
//
//   {"expect": {"operator": "o", "counts": {"Done": 3}, "total": 6,
//               "attention": {"ns/a": "stalled"}, "notListed": ["ns/b"],
//               "shadow": {"phase": "Start", "same": 4}, "minRefreshes": 1}}
//       waits (the page refreshing itself, never reloaded) until the page shows exactly that
//   {"timeline": {"operator": "o", "resource": "ns/a", "to": "Checking", "module": "sha256:…"}}
//       clicks the resource's link and waits for a transition to `to` by `module`, then goes back
//   {"screenshot": "/path.png"}
//
// and reads one line back per command: `OK …`, or `FAIL …` with what the page showed.
import { chromium } from 'playwright-core';
import readline from 'node:readline';

const [url] = process.argv.slice(2);
const WAIT_MS = Number(process.env.DASHBOARD_WAIT_MS || 60000);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
const pageErrors = [];
page.on('pageerror', (e) => pageErrors.push(String(e)));
await page.goto(url);

// What the page shows now for one operator.
async function shown(operator) {
  return page.evaluate((op) => {
    const section = [...document.querySelectorAll('section.operator')]
      .find((s) => s.dataset.operator === op);
    if (!section) return null;
    const counts = {};
    for (const td of section.querySelectorAll('[data-phase-count]')) {
      counts[td.dataset.phaseCount] = Number(td.textContent);
    }
    const attention = {};
    for (const tr of section.querySelectorAll('tr[data-resource]')) {
      attention[tr.dataset.resource] = tr.dataset.attention;
    }
    const shadows = {};
    for (const tr of section.querySelectorAll('tr[data-shadow]')) {
      shadows[tr.dataset.shadow] = Number(tr.querySelector('[data-same]').textContent);
    }
    const graphCounts = {};
    for (const g of section.querySelectorAll('svg g.phase')) {
      const t = g.querySelector('text.count');
      graphCounts[g.dataset.phase] = t ? parseInt(t.textContent, 10) : null;
    }
    return {
      counts,
      graphCounts,
      total: Number(section.querySelector('[data-total]')?.textContent),
      attention,
      shadows,
      refreshes: Number(document.getElementById('updated').dataset.refreshes),
    };
  }, operator);
}

function mismatch(want, got) {
  if (!got) return 'operator not on the page';
  for (const [phase, n] of Object.entries(want.counts || {})) {
    if (got.counts[phase] !== n) return `phase ${phase}: ${got.counts[phase]} shown, want ${n}`;
    if (got.graphCounts[phase] !== n) return `graph box ${phase}: ${got.graphCounts[phase]} shown, want ${n}`;
  }
  if (want.total !== undefined && got.total !== want.total) return `total ${got.total}, want ${want.total}`;
  for (const [resource, why] of Object.entries(want.attention || {})) {
    if (got.attention[resource] !== why) return `${resource}: ${got.attention[resource]} shown, want ${why}`;
  }
  for (const resource of want.notListed || []) {
    if (resource in got.attention) return `${resource} listed as ${got.attention[resource]}`;
  }
  if (want.minRefreshes && !(got.refreshes >= want.minRefreshes)) {
    return `the page refreshed itself ${got.refreshes} times, want at least ${want.minRefreshes}`;
  }
  if (want.shadow && got.shadows[want.shadow.phase] !== want.shadow.same) {
    return `shadow ${want.shadow.phase}: ${got.shadows[want.shadow.phase]} same shown, want ${want.shadow.same}`;
  }
  return null;
}

async function expect(want) {
  const deadline = Date.now() + WAIT_MS;
  let got, problem;
  for (;;) {
    got = await shown(want.operator);
    problem = mismatch(want, got);
    if (!problem) return `OK ${JSON.stringify(got)}`;
    if (Date.now() > deadline) return `FAIL ${problem}; page shows ${JSON.stringify(got)}`;
    await page.waitForTimeout(250);
  }
}

async function timeline(want) {
  const link = page.locator(`section.operator[data-operator="${want.operator}"] tr[data-resource="${want.resource}"] a`);
  await link.click();
  try {
    await page.waitForSelector(`[data-resource-page="${want.resource}"]`, { timeout: WAIT_MS });
    const entries = await page.locator('li[data-transition]').evaluateAll((lis) => lis.map((li) => ({
      to: li.dataset.to,
      module: li.querySelector('[data-module]').textContent,
      inputs: li.querySelector('[data-input-hash]').textContent,
    })));
    const hit = entries.find((e) => e.to === want.to && e.module === want.module && e.inputs.startsWith('sha256:'));
    if (want.screenshot) await page.screenshot({ path: want.screenshot, fullPage: true });
    return hit ? `OK ${JSON.stringify(entries)}` : `FAIL no transition to ${want.to} by ${want.module} with an input hash: ${JSON.stringify(entries)}`;
  } finally {
    await page.goBack();
    await page.waitForSelector('section.operator');
  }
}

const lines = readline.createInterface({ input: process.stdin });
let failed = false;
for await (const line of lines) {
  if (!line.trim()) continue;
  let answer;
  try {
    const command = JSON.parse(line);
    if (command.expect) answer = await expect(command.expect);
    else if (command.timeline) answer = await timeline(command.timeline);
    else if (command.screenshot) {
      await page.screenshot({ path: command.screenshot, fullPage: true });
      answer = `OK ${command.screenshot}`;
    } else answer = `FAIL unknown command ${line}`;
  } catch (e) {
    answer = `FAIL ${String(e).split('\n')[0]}`;
  }
  if (pageErrors.length) answer = `FAIL script errors on the page: ${pageErrors.join('; ')}`;
  failed ||= answer.startsWith('FAIL');
  process.stdout.write(answer.replace(/\n/g, ' ') + '\n');
}
await browser.close();
process.exit(failed ? 1 : 0);
