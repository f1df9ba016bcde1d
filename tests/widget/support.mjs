// Helpers for the browser tests: start the e2e server (examples/e2e_server.rs),
// launch Debian's Chromium through Playwright, drive the widget, run axe-core.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { mkdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';
import { chromium } from 'playwright-core';

export const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const serverBinary = process.env.DESKBELL_E2E_SERVER || join(root, 'target', 'debug', 'examples', 'e2e_server');
const children = [];

/** A folder under target/ for screenshots, created if missing. */
export function screenshotDir(name) {
  const dir = join(root, 'target', name);
  mkdirSync(dir, { recursive: true });
  return dir;
}

/** Starts the e2e server and returns the JSON line it prints: {api, page, operator, agent}. */
export async function startServer(env = {}) {
  const child = spawn(serverBinary, [], { env: { ...process.env, DESKBELL_LOG: 'warn', ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  const line = await new Promise((resolve, reject) => {
    const rl = createInterface({ input: child.stdout });
    rl.once('line', resolve);
    child.once('exit', (code) => reject(new Error(`e2e server exited with ${code}`)));
  });
  return JSON.parse(line);
}

export function stopServers() {
  for (const child of children) child.kill();
}

export function launchBrowser() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'],
  });
}

/** Queues one reply of the scripted model. */
export async function script(srv, reply) {
  const r = await fetch(`${srv.page}/__script`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(reply) });
  assert.equal(r.status, 200);
}

/** Every call the tools' backend has received so far. */
export async function toolCalls(srv) {
  return (await fetch(`${srv.page}/__calls`)).json();
}

/** A fresh browser context (empty local storage) on the host page, widget open. */
export async function openWidget(browser, srv, query = '') {
  const context = await browser.newContext({ viewport: { width: 1100, height: 800 } });
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e));
  await page.goto(`${srv.page}/${query}`);
  await page.locator('deskbell-widget button.launcher').click();
  await page.locator('deskbell-widget textarea#deskbell-input').waitFor();
  page.errors = errors;
  return page;
}

export async function send(page, text) {
  const box = page.locator('deskbell-widget textarea#deskbell-input');
  await box.fill(text);
  await box.press('Enter');
}

/** The widget's assistant bubbles, without the greeting and the typing line. */
export const assistant = (page) => page.locator('deskbell-widget .msg.assistant:not(.greeting):not(.typing)');

/** The conversation the widget on `page` keeps in local storage. */
export function widgetConversation(page) {
  return page.evaluate(() => JSON.parse(localStorage.getItem('deskbell:acme') || '{}').conversation);
}

/**
 * axe-core's violations on the page, one line each. The script is evaluated
 * through the DevTools protocol, so a page's strict CSP does not block it.
 */
export async function axeViolations(page) {
  if (!(await page.evaluate(() => typeof window.axe === 'object'))) await page.evaluate(axeSource);
  const result = await page.evaluate(async () => window.axe.run(document, { resultTypes: ['violations'] }));
  return result.violations.map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
}
