// End-to-end tests of the operator console (/console): the real server
// (examples/e2e_server.rs, scripted model) and headless Chromium driven by
// Playwright. Every page visited is checked with axe-core; screenshots go to
// target/console-screenshots/. Each test signs in with a fresh browser context.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  startServer, stopServers, launchBrowser, script, toolCalls, openWidget, send, assistant,
  widgetConversation, axeViolations, screenshotDir,
} from './support.mjs';

const shots = screenshotDir('console-screenshots');
let browser;
let server;

before(async () => {
  server = await startServer();
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  stopServers();
});

// What each page shows once its data has loaded.
const LOADED = {
  conversations: '#conversation-rows tr',
  audit: '#audit-rows tr',
  tools: '#tool-list article.tool',
  knowledge: '#knowledge-list > :not(.loading)',
  usage: '#usage-list [data-chart] canvas',
  strings: '#strings-table tbody tr',
};

/** A fresh context on the console's sign-in form; page errors and CSP reports are collected. */
async function openConsole(viewport = { width: 1280, height: 900 }) {
  const context = await browser.newContext({ viewport, acceptDownloads: true });
  const page = await context.newPage();
  page.problems = [];
  page.on('pageerror', (e) => page.problems.push(`page error: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error' && /Content.Security.Policy/i.test(m.text())) page.problems.push(m.text()); });
  await page.goto(`${server.api}/console`);
  await page.locator('#signin-form').waitFor();
  return page;
}

/** Signs in as `who` ('operator' is the admin, 'agent' the agent) and waits for the conversations page. */
async function signIn(who = 'operator', viewport) {
  const page = await openConsole(viewport);
  await page.locator('#signin-email').fill(server[who].email);
  await page.locator('#signin-password').fill(server[who].password);
  await page.locator('#signin-submit').click();
  await page.locator('#view h1', { hasText: 'Conversations' }).waitFor();
  await page.locator(LOADED.conversations).first().waitFor();
  return page;
}

/** Follows a nav link and waits for the page's data. */
async function go(page, name) {
  await page.locator(`#nav a[data-nav="${name}"]`).click();
  await page.waitForFunction((n) => location.hash === '#/' + n, name);
  await page.locator(LOADED[name]).first().waitFor();
}

async function checkPage(page, name) {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
  assert.deepEqual(await axeViolations(page), [], `axe-core on ${name}`);
}

function assertClean(page) {
  assert.deepEqual(page.problems, [], 'no script errors and no CSP violations');
}

async function toolArticle(page, name) {
  const tool = page.locator(`article.tool[data-site="acme"][data-tool="${name}"]`);
  await tool.waitFor();
  return tool;
}

/** Saves a tool's form and waits for the server's answer to be shown. */
async function saveTool(page, name) {
  const tool = await toolArticle(page, name);
  await tool.getByRole('button', { name: 'Save' }).click();
  await page.locator(`article.tool[data-tool="${name}"] .tool-status`, { hasText: 'Saved' }).waitFor();
}

/** Puts a tool back to the file's values through the API, whatever the page did. */
async function resetTool(name) {
  try {
    const login = await fetch(`${server.api}/v1/operator/session`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: server.operator.email, password: server.operator.password }),
    });
    const cookie = (login.headers.get('set-cookie') || '').split(';')[0];
    const { csrf } = await login.json();
    await fetch(`${server.api}/v1/operator/tools/acme/${name}`, {
      method: 'PATCH', headers: { 'content-type': 'application/json', cookie, 'x-deskbell-csrf': csrf },
      body: JSON.stringify({ reset: true }),
    });
  } catch { /* Only a clean-up: the test itself has already passed or failed. */ }
}

test('signing in with a wrong password shows an error, the right one opens the conversations, signing out returns to the form', async () => {
  const page = await openConsole();
  assert.equal(await page.locator('#top').isHidden(), true, 'no navigation before signing in');
  await page.locator('#signin-email').fill(server.operator.email);
  await page.locator('#signin-password').fill('not the password');
  await page.locator('#signin-submit').click();
  await page.locator('#signin-error', { hasText: /wrong/ }).waitFor();
  await checkPage(page, 'sign-in-error');

  await page.locator('#signin-password').fill(server.operator.password);
  await page.locator('#signin-submit').click();
  await page.locator('#view h1', { hasText: 'Conversations' }).waitFor();
  await page.locator(LOADED.conversations).first().waitFor();
  assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Conversations', 'focus moves to the heading');
  assert.equal(await page.locator('#nav a[aria-current="page"]').innerText(), 'Conversations');
  assert.match(await page.locator('#whoami').innerText(), /admin@example\.test/);
  assert.equal(await page.locator('#signin-error').innerText(), '');
  await checkPage(page, 'conversations');

  await page.locator('#signout').click();
  await page.locator('#signin-form').waitFor();
  assert.equal(await page.locator('#top').isHidden(), true);
  assert.equal(await page.locator('#view').isHidden(), true);
  // The session is gone on the server too: a reload stays signed out.
  await page.reload();
  await page.locator('#signin-form').waitFor();
  assert.equal(await page.locator('#top').isHidden(), true);
  assertClean(page);
  await page.context().close();
});

test('a conversation started in the widget appears in the console list live, without a reload', async () => {
  const page = await signIn();
  await page.evaluate(() => { window.__sameDocument = true; });
  const widget = await openWidget(browser, server);
  await script(server, { text: 'Live hello from the assistant.' });
  await send(widget, 'Hello from a live visitor');
  await assistant(widget).last().getByText('Live hello from the assistant.').waitFor();
  const id = await widgetConversation(widget);
  assert.ok(id, 'the widget keeps its conversation');

  const row = page.locator(`#conversation-rows tr[data-conversation="${id}"]`);
  await row.waitFor({ timeout: 15000 });
  await row.filter({ hasText: /Live hello from the assistant|Hello from a live visitor/ }).waitFor();
  assert.equal(await page.evaluate(() => window.__sameDocument), true, 'the page was not reloaded');
  assert.equal(await page.locator('#conversation-rows tr').first().getAttribute('data-conversation'), id, 'newest first');
  await checkPage(page, 'conversations-live');
  assertClean(page);
  await widget.context().close();
  await page.context().close();
});

test('a conversation shows its card with its lines, and the step line Confirmed once the visitor confirms', async () => {
  const widget = await openWidget(browser, server);
  await script(server, { tool_calls: [{ name: 'cancel_order', arguments: { order_id: 42 } }] });
  await send(widget, 'Please cancel order 42');
  const widgetCard = widget.locator('deskbell-widget .card');
  await widgetCard.waitFor();
  const id = await widgetConversation(widget);

  const page = await signIn();
  await page.locator(`#conversation-rows tr[data-conversation="${id}"] a`).click();
  await page.locator('#view h1', { hasText: 'Conversation' }).waitFor();
  const card = page.locator('#messages .card[data-status="pending"]');
  await card.waitFor();
  assert.equal(await card.locator('.card-title').innerText(), 'Cancel an order');
  await card.getByText('Order ID: 42').waitFor();
  assert.equal(await page.locator('#messages .msg.visitor').first().locator('.body').innerText(), 'Please cancel order 42');
  const call = page.locator('#calls article.call').filter({ hasText: 'cancel_order' }).first();
  assert.deepEqual(JSON.parse(await call.locator('pre.json').innerText()), { order_id: 42 });
  await call.locator('tr[data-event="requested"]').waitFor();
  assert.match(await page.locator('#conversation-meta').innerText(), /Acme|acme/);
  await checkPage(page, 'conversation-card');

  // The visitor confirms in the widget; the console hears of it and redraws.
  await script(server, { text: 'Order 42 is cancelled.' });
  await widgetCard.getByRole('button', { name: /^Confirm/ }).click();
  await widget.locator('deskbell-widget .step[data-status="confirmed"]').waitFor();
  const step = page.locator('#messages .step[data-status="confirmed"]');
  await step.waitFor({ timeout: 15000 });
  assert.match(await step.innerText(), /Confirmed/);
  await page.locator('#messages .msg.assistant', { hasText: 'Order 42 is cancelled.' }).waitFor({ timeout: 15000 });
  assert.equal(await page.locator('#messages .card[data-status="pending"]').count(), 0);
  await checkPage(page, 'conversation-confirmed');
  assertClean(page);
  await widget.context().close();
  await page.context().close();
});

test('switching lookup_order to Needs confirmation in the console makes its next call raise a card', async () => {
  const page = await signIn();
  try {
    await go(page, 'tools');
    const tool = await toolArticle(page, 'lookup_order');
    assert.equal(await tool.getAttribute('data-policy'), 'auto');
    assert.equal(await tool.getByLabel('Runs automatically').isChecked(), true);
    await checkPage(page, 'tools');

    await tool.getByLabel('Needs confirmation', { exact: true }).check();
    await saveTool(page, 'lookup_order');
    await page.locator('article.tool[data-tool="lookup_order"][data-policy="confirm"]').waitFor();
    assert.match(await tool.locator('.changed').innerText(), /Changed in console by admin@example\.test/);

    // The card preview renders what a visitor would see.
    await tool.getByRole('button', { name: 'Preview card' }).click();
    const preview = tool.locator('.preview-card');
    await preview.waitFor();
    assert.equal(await preview.locator('.card-title').innerText(), 'Look up an order');
    await preview.getByText('Order ID: 42').waitFor();
    await checkPage(page, 'tools-changed');

    const before = (await toolCalls(server)).length;
    const widget = await openWidget(browser, server);
    await script(server, { tool_calls: [{ name: 'lookup_order', arguments: { order_id: 42 } }] });
    await send(widget, 'Where is order 42?');
    const card = widget.locator('deskbell-widget .card');
    await card.waitFor();
    assert.equal(await card.locator('h3').innerText(), 'Look up an order');
    assert.equal(await card.getByRole('button', { name: /^Confirm/ }).isVisible(), true);
    assert.equal((await toolCalls(server)).length, before, 'nothing reached the backend');
    await widget.screenshot({ path: join(shots, 'widget-card-after-policy-change.png') });
    await widget.context().close();

    // Reset to file puts the policy back.
    await tool.getByRole('button', { name: 'Reset to file' }).click();
    await page.locator('article.tool[data-tool="lookup_order"][data-policy="auto"]').waitFor();
    assert.match(await tool.locator('.changed').innerText(), /As in the config file/);
    assertClean(page);
  } finally {
    await resetTool('lookup_order');
    await page.context().close();
  }
});

test('an admin sets a rule (confirm_when) on a tool; one that does not compile is explained beside the field', async () => {
  const page = await signIn();
  try {
    await go(page, 'tools');
    const tool = await toolArticle(page, 'cancel_order');
    const rule = tool.getByLabel('Rule (confirm_when)');
    assert.equal(await rule.inputValue(), '', 'the file sets no rule');

    await rule.fill('args.order_id >');
    await tool.getByRole('button', { name: 'Save' }).click();
    await tool.locator('.rule .error-text', { hasText: /^confirm_when: does not compile/ }).waitFor();
    assert.equal(await rule.getAttribute('aria-invalid'), 'true');
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'tool-acme-cancel_order-rule', 'focus goes to the rule');
    await checkPage(page, 'tools-rule-error');

    await rule.fill('args.order_id > 100');
    await saveTool(page, 'cancel_order');
    await page.locator('article.tool[data-tool="cancel_order"][data-confirm-when="args.order_id > 100"]').waitFor();
    const { items } = await page.evaluate(() => fetch('/v1/operator/tools?site=acme').then((r) => r.json()));
    const saved = items.find((t) => t.name === 'cancel_order');
    assert.equal(saved.confirm_when, 'args.order_id > 100');
    assert.equal(saved.policy, 'confirm', 'only the rule was sent');
    assert.equal(await rule.inputValue(), 'args.order_id > 100');
    await checkPage(page, 'tools-rule');
    assertClean(page);
  } finally {
    await resetTool('cancel_order');
    await page.context().close();
  }
});

test('the audit page filters by event and its export downloads lines that parse as JSON', async () => {
  const page = await signIn();
  try {
    // A change of its own to find, so this test does not lean on the others.
    await go(page, 'tools');
    const tool = await toolArticle(page, 'cancel_order');
    await tool.getByLabel('Description').fill('Cancels an order that has not shipped (audit test).');
    await saveTool(page, 'cancel_order');

    await go(page, 'audit');
    await page.locator('#audit-event').selectOption('tool_changed');
    await page.waitForFunction(() => {
      const rows = [...document.querySelectorAll('#audit-rows tr')];
      return rows.length > 0 && rows.every((r) => r.dataset.event === 'tool_changed');
    });
    const row = page.locator('#audit-rows tr[data-event="tool_changed"]').filter({ hasText: 'cancel_order' }).first();
    assert.match(await row.innerText(), /admin@example\.test/);
    await checkPage(page, 'audit');

    const [jsonl] = await Promise.all([page.waitForEvent('download'), page.locator('#export-jsonl').click()]);
    const lines = readFileSync(await jsonl.path(), 'utf8').split('\n').filter((l) => l.trim());
    assert.ok(lines.length > 0, 'the export has rows');
    const rows = lines.map((l) => JSON.parse(l));
    assert.ok(rows.some((r) => r.event === 'tool_changed' && r.tool === 'cancel_order'), 'the change is exported');

    const [csv] = await Promise.all([page.waitForEvent('download'), page.locator('#export-csv').click()]);
    const header = readFileSync(await csv.path(), 'utf8').split('\n')[0];
    assert.match(header, /event/);
    assertClean(page);
  } finally {
    await resetTool('cancel_order');
    await page.context().close();
  }
});

test('the usage page draws its charts and gives the same numbers in a table', async () => {
  const page = await signIn();
  await go(page, 'usage');
  const site = page.locator('#usage-list section[data-site="acme"]');
  await site.locator('[data-chart="tokens"] canvas').first().waitFor();
  await site.locator('[data-chart="activity"] canvas').first().waitFor();
  assert.equal(await site.locator('table tbody tr').count(), 14, 'fourteen days by default');
  assert.match(await site.locator('table thead').innerText(), /Input tokens/);
  await checkPage(page, 'usage');
  await page.locator('#usage-days').selectOption('7');
  await page.waitForFunction(() => document.querySelectorAll('#usage-list section[data-site="acme"] table tbody tr').length === 7);
  await site.locator('[data-chart="tokens"] canvas').first().waitFor();
  assertClean(page);
  await page.context().close();
});

test('the knowledge page shows each site and what a search would give the model', async () => {
  const page = await signIn();
  await go(page, 'knowledge');
  const site = page.locator('#knowledge-list section[data-site="acme"]');
  assert.match(await site.innerText(), /Indexed/i);
  await site.getByLabel('Question').fill('How fast do you ship?');
  await site.getByRole('button', { name: 'Search' }).click();
  await site.locator('.passages :is(ol, p)').first().waitFor();
  assert.equal(await site.getByRole('button', { name: 'Re-ingest' }).count(), 1, 'an admin may re-ingest');
  // A re-ingest runs as a job on the server: its progress bar shows while it
  // runs, and its report replaces the last one when it ends.
  await site.getByRole('button', { name: 'Re-ingest' }).click();
  await site.locator('.ingest-status', { hasText: /Ingest finished/ }).waitFor();
  assert.equal(await site.locator('progress.ingest-progress').isHidden(), true, 'the bar goes once it ends');
  await checkPage(page, 'knowledge');
  assertClean(page);
  await page.context().close();
});

test('an agent sees tools and knowledge without the controls that change them', async () => {
  const page = await signIn('agent');
  assert.match(await page.locator('#whoami').innerText(), /agent/);
  await go(page, 'tools');
  const tool = await toolArticle(page, 'cancel_order');
  assert.equal(await page.locator('#tool-list').getByRole('button', { name: 'Save' }).count(), 0);
  assert.equal(await page.locator('#tool-list').getByRole('button', { name: 'Reset to file' }).count(), 0);
  assert.equal(await page.locator('#tool-list input[type="radio"]:enabled').count(), 0);
  assert.match(await tool.innerText(), /Needs confirmation/);
  assert.match(await tool.innerText(), /Cancel an order/);
  assert.match(await tool.innerText(), /Rule \(confirm_when\)/i, 'the rule is shown, read-only');
  // Reading stays possible: an agent may preview a card.
  await tool.getByRole('button', { name: 'Preview card' }).click();
  await tool.locator('.preview-card').getByText('Order ID: 42').waitFor();
  await checkPage(page, 'tools-agent');

  await go(page, 'knowledge');
  assert.equal(await page.getByRole('button', { name: 'Re-ingest' }).count(), 0);
  await checkPage(page, 'knowledge-agent');
  assertClean(page);
  await page.context().close();
});

test('the console fits a 390 px phone without sideways scrolling', async () => {
  const widget = await openWidget(browser, server);
  await script(server, { tool_calls: [{ name: 'cancel_order', arguments: { order_id: 77, reason: 'Ordered the wrong size by mistake' } }] });
  await send(widget, 'Cancel order 77 please');
  await widget.locator('deskbell-widget .card').waitFor();
  const id = await widgetConversation(widget);
  await widget.context().close();

  const page = await signIn('operator', { width: 390, height: 844 });
  const width = () => page.evaluate(() => document.documentElement.scrollWidth);
  for (const name of ['conversations', 'audit', 'tools', 'knowledge', 'usage']) {
    await go(page, name);
    assert.ok((await width()) <= 390, `${name}: the page is ${await width()} px wide`);
    await checkPage(page, `phone-${name}`);
  }
  await page.evaluate((c) => { location.hash = '#/conversations/' + c; }, id);
  await page.locator('#messages .card').waitFor();
  assert.ok((await width()) <= 390, `conversation: the page is ${await width()} px wide`);
  await checkPage(page, 'phone-conversation');
  assertClean(page);
  await page.context().close();
});

test('the console works from the keyboard: skip link, navigation by Tab and Enter', async () => {
  const page = await openConsole();
  // Sign in with keys only.
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'skip');
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'signin-email');
  await page.keyboard.type(server.operator.email);
  await page.keyboard.press('Tab');
  await page.keyboard.type(server.operator.password);
  await page.keyboard.press('Enter');
  await page.locator('#view h1', { hasText: 'Conversations' }).waitFor();

  // The skip link shows when focused, and Tab from it reaches the navigation.
  await page.locator('#skip').focus();
  const box = await page.locator('#skip').boundingBox();
  assert.ok(box && box.y >= 0, 'the focused skip link is on screen');
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => Boolean(document.activeElement?.closest('nav'))), true, 'Tab reaches the nav');
  for (let i = 0; i < 8 && (await page.evaluate(() => document.activeElement?.textContent)) !== 'Audit'; i++) await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Audit');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => location.hash === '#/audit');
  await page.locator('#view h1', { hasText: 'Audit' }).waitFor();
  assert.deepEqual(await page.evaluate(() => [document.activeElement?.tagName, document.activeElement?.textContent]), ['H1', 'Audit']);
  assert.equal(await page.locator('#nav a[aria-current="page"]').innerText(), 'Audit');

  // Enter on the skip link moves focus into the main content and keeps the page.
  await page.locator('#skip').focus();
  await page.keyboard.press('Enter');
  assert.equal(await page.evaluate(() => Boolean(document.activeElement?.closest('main'))), true);
  assert.equal(await page.evaluate(() => location.hash), '#/audit');
  await page.locator(LOADED.audit).first().waitFor();
  await checkPage(page, 'keyboard-audit');
  assertClean(page);
  await page.context().close();
});

test('a visitor\'s rating shows beside the answer and as satisfaction in usage, and a conversation exports as JSON', async () => {
  const widget = await openWidget(browser, server);
  await script(server, { text: 'Our returns window is 30 days.' });
  await send(widget, 'How long can I return things?');
  const answer = assistant(widget).last();
  await answer.getByText('Our returns window').waitFor();
  await answer.getByRole('button', { name: 'Not helpful', exact: true }).click();
  await answer.getByText('Thanks for your feedback.').waitFor();
  await answer.locator('textarea.comment').fill('<b>Which</b> days count?');
  await answer.getByRole('button', { name: 'Send feedback' }).click();
  await answer.locator('textarea.comment').waitFor({ state: 'hidden' });
  const id = await widgetConversation(widget);

  const page = await signIn();
  await page.goto(`${server.api}/console#/conversations/${id}`);
  const rated = page.locator('#messages .feedback[data-rating="down"]');
  await rated.waitFor();
  assert.match(await rated.innerText(), /Rated not helpful/);
  assert.equal(await rated.locator('.comment bdi').innerText(), '<b>Which</b> days count?', 'the comment is text');
  await checkPage(page, 'conversation-feedback');
  const [saved] = await Promise.all([page.waitForEvent('download'), page.locator('#export-conversation').click()]);
  const exported = JSON.parse(readFileSync(await saved.path(), 'utf8'));
  assert.equal(exported.id, id);
  assert.equal(exported.messages[1].feedback.rating, 'down');

  await go(page, 'usage');
  const table = page.locator('#usage-list section[data-site="acme"] table');
  assert.match(await table.locator('thead').innerText(), /Satisfaction/);
  assert.match(await table.locator('tbody tr').last().innerText(), /\b0 %/);
  await go(page, 'audit');
  const [feedback] = await Promise.all([page.waitForEvent('download'), page.locator('#export-feedback').click()]);
  const csv = readFileSync(await feedback.path(), 'utf8');
  assert.match(csv.split('\n')[0], /^updated_at,created_at,site,conversation,message,rating,comment$/);
  assert.ok(csv.includes(id), csv);
  assertClean(page);
  await widget.context().close();
  await page.context().close();
});

test('an admin gives the widget\'s greeting the site\'s own words on the Widget words page, and resets it', async () => {
  const page = await signIn();
  await go(page, 'strings');
  await page.locator('#strings-acme-key').selectOption('greeting');
  await page.locator('#strings-acme-language').selectOption('*');
  await page.locator('#strings-acme-text').fill('Welcome to Acme — ask us anything.');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.locator('#strings-table tr[data-key="greeting"] .console-words', { hasText: 'Welcome to Acme' }).waitFor();
  await checkPage(page, 'widget-words');
  const widget = await openWidget(browser, server);
  assert.equal(await widget.locator('deskbell-widget .greeting').innerText(), 'Welcome to Acme — ask us anything.');
  await widget.context().close();
  await page.locator('#strings-acme-key').selectOption('greeting');
  await page.getByRole('button', { name: 'Reset to the file' }).click();
  await page.locator('#strings-table tr[data-key="greeting"] .console-words', { hasText: '—' }).waitFor();
  assertClean(page);
  await page.context().close();
});
