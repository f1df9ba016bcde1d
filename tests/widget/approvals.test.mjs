// Approvals beyond the visitor end to end (SPEC §20), in real browsers on one
// server: a visitor edits a card's quantity and confirms the card the server
// signed for the edited call; a refund that needs the visitor and a teammate
// waits in the console's Approvals page until an admin approves it, and the
// widget shows the outcome and the assistant's continuation live.
//
// The tools of this file are added to the e2e server's site through
// DESKBELL_E2E_TOOLS (examples/e2e_server.rs appends it to its config, with
// {hook} standing for the recording tool endpoint).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import {
  startServer, stopServers, launchBrowser, script, toolCalls, openWidget, send, assistant,
  widgetConversation, axeViolations, screenshotDir,
} from './support.mjs';

const TOOLS = `
[[site.tool]]
name = "order_more"
label = "Order more of an item"
policy = "confirm"
editable = ["quantity"]
quota = { per = "visitor", window = "month", max = 3 }
url = "{hook}/order"
input_schema = { type = "object", required = ["sku", "quantity"], properties = { sku = { type = "string", title = "SKU" }, quantity = { type = "integer", minimum = 1, maximum = 10 } } }

[[site.tool]]
name = "refund_order"
label = "Refund an order"
policy = "confirm+approve"
approvers = ["admin"]
approval_ttl_min = 60
url = "{hook}/refund"
input_schema = { type = "object", required = ["order_id", "amount"], properties = { order_id = { type = "integer", title = "Order ID" }, amount = { type = "number" } } }
`;

const shots = screenshotDir('approvals-screenshots');
let browser;
let server;

before(async () => {
  server = await startServer({ DESKBELL_E2E_TOOLS: TOOLS });
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  stopServers();
});

/** The calls the tools' backend received at `path`. */
const callsTo = async (path) => (await toolCalls(server)).filter((c) => c.path === path);

/** The call id of the element the widget's shadow root has focused. */
const focusedCall = (page) => page.evaluate(() => document.querySelector('deskbell-widget').shadowRoot.activeElement?.getAttribute('data-call'));

/** Signs `who` in to the console and opens the Approvals page from the nav. */
async function approvalsPage(who) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.problems = [];
  page.on('pageerror', (e) => page.problems.push(`page error: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error' && /Content.Security.Policy/i.test(m.text())) page.problems.push(m.text()); });
  await page.goto(`${server.api}/console`);
  await page.locator('#signin-email').fill(server[who].email);
  await page.locator('#signin-password').fill(server[who].password);
  await page.locator('#signin-submit').click();
  await page.locator('#view h1', { hasText: 'Conversations' }).waitFor();
  return page;
}

async function goToApprovals(page) {
  await page.locator('#nav a[data-nav="approvals"]').click();
  await page.waitForFunction(() => location.hash === '#/approvals');
  await page.locator('#view h1', { hasText: 'Approvals' }).waitFor();
}

/**
 * The widget on a site without a desk: the visitor's token says `handoff:
 * false`, so only a call waiting for a teammate may open the live channel.
 */
async function widgetWithoutDesk() {
  const context = await browser.newContext({ viewport: { width: 1100, height: 800 } });
  await context.route('**/v1/visitors', async (route) => {
    const response = await route.fetch();
    const minted = await response.json();
    await route.fulfill({ response, json: { ...minted, handoff: false } });
  });
  const page = await context.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(e));
  await page.goto(`${server.page}/`);
  await page.locator('deskbell-widget button.launcher').click();
  await page.locator('deskbell-widget textarea#deskbell-input').waitFor();
  return page;
}

test('a visitor edits the quantity on a card, confirms the re-signed card, and the backend gets the edited value once', async () => {
  const page = await openWidget(browser, server);
  await script(server, { tool_calls: [{ name: 'order_more', arguments: { sku: 'MUG-1', quantity: 1 } }] });
  await send(page, 'One more mug, please');
  const card = page.locator('deskbell-widget .card');
  await card.waitFor();
  const first = await card.getAttribute('data-call');
  assert.equal(await card.locator('h3').innerText(), 'Order more of an item');
  assert.deepEqual(await card.locator('dt').allInnerTexts(), ['SKU', 'Quantity']);
  assert.equal(await card.locator('dd').first().innerText(), 'MUG-1', 'a line that is not editable stays text');
  const quantity = card.getByLabel('Quantity');
  assert.equal(await quantity.getAttribute('type'), 'number');
  assert.equal(await quantity.getAttribute('step'), '1');
  assert.equal(await quantity.inputValue(), '1');
  assert.match(await card.locator('.quota').innerText(), /^[0-3] of 3 left this month$/);
  await page.screenshot({ path: join(shots, 'widget-editable-card.png') });
  assert.deepEqual(await axeViolations(page), [], 'axe-core on the editable card');

  // A value the schema refuses is said on the card, which stays answerable.
  await quantity.fill('99');
  await card.getByRole('button', { name: /^Confirm/ }).click();
  await card.locator('.note', { hasText: /\S/ }).waitFor();
  assert.equal(await card.getAttribute('data-call'), first, 'the same card');
  assert.equal(await card.getByRole('button', { name: /^Confirm/ }).isEnabled(), true);
  assert.equal(await page.locator('deskbell-widget .error').count(), 0, 'no error line in the log');
  assert.equal((await callsTo('/order')).length, 0);

  // An accepted edit: the server signs a new card for the edited call, which
  // takes the old one's place (no "Cancelled" line), with the focus on it.
  await quantity.fill('3');
  await card.getByRole('button', { name: /^Confirm/ }).click();
  const second = page.locator(`deskbell-widget .card:not([data-call="${first}"])`);
  await second.waitFor();
  const call = await second.getAttribute('data-call');
  assert.equal(await page.locator('deskbell-widget .card').count(), 1, 'the new card replaced the old one');
  assert.equal(await page.locator('deskbell-widget .step[data-status="cancelled"]').count(), 0);
  assert.equal(await second.getByLabel('Quantity').inputValue(), '3', 'the new card shows the edited value');
  assert.equal(await focusedCall(page), call, 'the focus moves to the new card');
  assert.equal((await callsTo('/order')).length, 0, 'nothing ran before the new card was confirmed');

  await script(server, { text: 'Three mugs are on their way.' });
  await second.getByRole('button', { name: /^Confirm/ }).click();
  await page.locator(`deskbell-widget .step[data-call="${call}"][data-status="confirmed"]`).waitFor();
  await assistant(page).last().getByText('Three mugs are on their way.').waitFor();
  const calls = await callsTo('/order');
  assert.equal(calls.length, 1, 'the edited call ran exactly once');
  assert.deepEqual(calls[0].body.arguments, { sku: 'MUG-1', quantity: 3 });
  assert.equal(calls[0].body.call, call);
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('a refund the visitor confirms waits for a teammate, an admin approves it in the console, and the widget shows the outcome live', async () => {
  const visitor = await widgetWithoutDesk();
  await script(server, { tool_calls: [{ name: 'refund_order', arguments: { order_id: 42, amount: 30 } }] });
  await send(visitor, 'Please refund order 42');
  const card = visitor.locator('deskbell-widget .card');
  await card.waitFor();
  const call = await card.getAttribute('data-call');
  const conversation = await widgetConversation(visitor);
  await card.getByRole('button', { name: /^Confirm/ }).click();
  const line = visitor.locator(`deskbell-widget .step[data-call="${call}"]`);
  await visitor.locator(`deskbell-widget .step[data-call="${call}"][data-status="awaiting_approval"]`).waitFor();
  assert.match(await line.innerText(), /Waiting for a teammate/);
  assert.equal(await visitor.locator('deskbell-widget .card').count(), 0, 'the card settled into the line');
  assert.equal((await callsTo('/refund')).length, 0, 'nothing runs before a teammate approves');
  await visitor.evaluate(() => { window.__sameDocument = true; });

  // An agent sees the call but may not decide it, and is told why.
  const agent = await approvalsPage('agent');
  await goToApprovals(agent);
  const seen = agent.locator(`article.approval[data-call="${call}"]`);
  await seen.waitFor();
  const approveOff = seen.getByRole('button', { name: 'Approve' });
  assert.equal(await approveOff.isDisabled(), true);
  assert.equal(await seen.getByRole('button', { name: 'Decline' }).isDisabled(), true);
  const why = await approveOff.getAttribute('aria-describedby');
  assert.match(await agent.locator(`[id="${why}"]`).innerText(), /admin/);
  assert.deepEqual(agent.problems, []);
  await agent.context().close();

  // The admin's nav counts it; the Approvals page shows its lines.
  const admin = await approvalsPage('operator');
  await admin.locator('#approvals-badge', { hasText: '1' }).waitFor();
  await goToApprovals(admin);
  const item = admin.locator(`article.approval[data-call="${call}"]`);
  await item.waitFor();
  assert.equal(await item.locator('h2').innerText(), 'Refund an order');
  assert.deepEqual(await item.locator('dl.args dt').allInnerTexts(), ['Order ID', 'Amount']);
  assert.deepEqual(await item.locator('dl.args dd').allInnerTexts(), ['42', '30']);
  assert.equal(await item.getByRole('link', { name: conversation }).getAttribute('href'), `#/conversations/${conversation}`);
  assert.match(await item.innerText(), /\d+ (min|h)/, 'the time left');
  await admin.screenshot({ path: join(shots, 'console-approvals.png'), fullPage: true });
  assert.deepEqual(await axeViolations(admin), [], 'axe-core on the Approvals page');

  await item.getByLabel('Note (optional)').fill('Checked the order: it never arrived.');
  await script(server, { text: 'Your refund of 30 is on its way.' });
  await item.getByRole('button', { name: 'Approve' }).click();
  await admin.locator('#approval-status', { hasText: /Approved/ }).waitFor();
  assert.equal(await admin.locator('article.approval').count(), 0, 'the call left the list');
  await admin.locator('#approvals-empty').waitFor();
  await admin.locator('#approvals-badge').waitFor({ state: 'hidden' });

  // The widget hears of it on its live channel: the line turns, the answer comes, no reload.
  await visitor.locator(`deskbell-widget .step[data-call="${call}"][data-status="confirmed"]`).waitFor({ timeout: 15000 });
  const answer = assistant(visitor).filter({ hasText: 'Your refund of 30 is on its way.' });
  await answer.waitFor({ timeout: 15000 });
  assert.equal(await answer.count(), 1);
  assert.equal(await visitor.evaluate(() => window.__sameDocument), true, 'the page was not reloaded');
  const calls = await callsTo('/refund');
  assert.equal(calls.length, 1, 'the refund ran exactly once');
  assert.deepEqual(calls[0].body.arguments, { order_id: 42, amount: 30 });

  // After a reload the history has the answer, and a replay of the whole
  // live channel (from its first event) does not add it a second time.
  const seenBefore = await visitor.evaluate(() => {
    const s = JSON.parse(localStorage.getItem('deskbell:acme'));
    const before = s.seen; s.seen = 0; s.handoff = true;
    localStorage.setItem('deskbell:acme', JSON.stringify(s));
    return before;
  });
  assert.ok(seenBefore > 0, 'the widget listened on the live channel');
  await visitor.reload();
  await answer.waitFor();
  await visitor.waitForFunction((n) => JSON.parse(localStorage.getItem('deskbell:acme')).seen >= n, seenBefore);
  assert.equal(await answer.count(), 1, 'the replayed answer is not shown twice');
  assert.equal(await visitor.locator(`deskbell-widget .step[data-call="${call}"][data-status="confirmed"]`).count(), 1);

  assert.deepEqual(admin.problems, []);
  assert.deepEqual(visitor.errors, []);
  await admin.context().close();
  await visitor.context().close();
});
