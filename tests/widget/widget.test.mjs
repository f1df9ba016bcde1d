// End-to-end tests of the widget: the real server (examples/e2e_server.rs, with a
// scripted model) and headless Chromium driven by Playwright. Screenshots of the
// main states go to target/widget-screenshots/.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import { createHmac } from 'node:crypto';
import { join } from 'node:path';
import {
  axeSource, launchBrowser, openWidget as openWidgetIn, screenshotDir, script, send, startServer,
  stopServers, toolCalls, assistant,
} from './support.mjs';

const shots = screenshotDir('widget-screenshots');
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

/** A fresh browser context (empty local storage) on the host page, widget open. */
const openWidget = (srv = server, query = '') => openWidgetIn(browser, srv, query);

test('a question streams into an answer rendered as Markdown', async () => {
  const page = await openWidget();
  assert.equal(await page.evaluate(() => document.activeElement?.tagName), 'DESKBELL-WIDGET', 'focus moves into the widget');
  await script(server, { text: 'Hello **there**, we ship in *3 to 5* days.\n\n- fast\n- tracked' });
  await send(page, 'How fast do you ship?');
  await assistant(page).last().locator('li').nth(1).waitFor();
  const bubble = assistant(page).last();
  assert.match(await bubble.innerText(), /Hello there, we ship in 3 to 5 days\./);
  assert.equal(await bubble.locator('strong').innerText(), 'there');
  assert.equal(await bubble.locator('li').count(), 2);
  assert.equal(await page.locator('deskbell-widget .msg.visitor').innerText(), 'How fast do you ship?');
  await page.screenshot({ path: join(shots, 'answer.png') });
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('Shift+Enter writes a new line and Enter sends', async () => {
  const page = await openWidget();
  const box = page.locator('deskbell-widget textarea#deskbell-input');
  await box.fill('line one');
  await box.press('Shift+Enter');
  await box.pressSequentially('line two');
  assert.equal(await box.inputValue(), 'line one\nline two');
  await script(server, { text: 'Got both lines.' });
  await box.press('Enter');
  await assistant(page).last().getByText('Got both lines.').waitFor();
  assert.equal(await page.locator('deskbell-widget .msg.visitor').innerText(), 'line one\nline two');
  await page.context().close();
});

test('a card shows the label and the argument lines, and confirming runs the call once', async () => {
  const page = await openWidget();
  await script(server, { tool_calls: [{ name: 'cancel_order', arguments: { order_id: 42 } }] });
  await send(page, 'Cancel order 42');
  const card = page.locator('deskbell-widget .card');
  await card.waitFor();
  assert.equal(await card.locator('h3').innerText(), 'Cancel an order');
  assert.deepEqual(await card.locator('dt').allInnerTexts(), ['Order ID']);
  assert.deepEqual(await card.locator('dd').allInnerTexts(), ['42']);
  assert.match(await card.locator('.left').innerText(), /Expires in \d+:\d\d/);
  await page.screenshot({ path: join(shots, 'card.png') });
  const before = (await toolCalls(server)).length;
  await script(server, { text: 'Order 42 is cancelled.' });
  await card.getByRole('button', { name: /^Confirm/ }).click();
  const step = page.locator('deskbell-widget .step[data-status="confirmed"]');
  await step.waitFor();
  assert.match(await step.innerText(), /✓\s*Confirmed/);
  await assistant(page).last().getByText('Order 42 is cancelled.').waitFor();
  assert.equal(await assistant(page).count(), 2, 'the answer continues in a new bubble');
  assert.equal(await page.locator('deskbell-widget .card').count(), 0, 'the card became a step line');
  const calls = (await toolCalls(server)).slice(before);
  assert.equal(calls.length, 1);
  assert.deepEqual(calls[0].body.arguments, { order_id: 42 });
  await page.screenshot({ path: join(shots, 'confirmed.png') });
  await page.context().close();
});

test('a card shows hidden characters visibly, as signed, and the backend gets what it showed', async () => {
  const page = await openWidget();
  const reason = 'Paris \u202e0001 sirap\u200b';
  await script(server, { tool_calls: [{ name: 'cancel_order', arguments: { order_id: 7, reason } }] });
  await send(page, 'Cancel order 7');
  const card = page.locator('deskbell-widget .card');
  await card.waitFor();
  const shown = await card.locator('dd').allInnerTexts();
  // The signed lines, as the history gives them back.
  const signed = await page.evaluate(async (api) => {
    const { token, conversation } = JSON.parse(localStorage.getItem('deskbell:acme'));
    const r = await fetch(`${api}/v1/conversations/${conversation}`, { headers: { authorization: `Bearer ${token}` } });
    const h = await r.json();
    return h.messages.at(-1).steps[0].arguments.map((l) => l.value);
  }, server.api);
  assert.deepEqual(shown, signed, 'the card shows exactly the signed lines');
  assert.deepEqual(shown, ['7', 'Paris ⟨U+202E⟩0001 sirap⟨U+200B⟩']);
  assert.ok(!(await card.innerText()).includes('\u202e'), 'no bidi override reaches the page');
  const before = (await toolCalls(server)).length;
  await script(server, { text: 'Done.' });
  await card.getByRole('button', { name: /^Confirm/ }).click();
  await assistant(page).last().getByText('Done.').waitFor();
  const calls = (await toolCalls(server)).slice(before);
  assert.deepEqual(calls[0].body.arguments, { order_id: 7, reason });
  await page.context().close();
});

/** An HS256 identity token, as the operator's backend signs one (SPEC §4). */
function identityToken(claims) {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const head = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64(claims)}`;
  const mac = createHmac('sha256', 'e2e-identity-secret').update(head).digest('base64url');
  return `${head}.${mac}`;
}

test('Deskbell.identify takes an identity token and the visitor is minted with it', async () => {
  const page = await openWidget();
  const minted = [];
  page.on('request', (r) => { if (r.url().endsWith('/v1/visitors')) minted.push(JSON.parse(r.postData())); });
  const token = identityToken({ sub: 'user-42', exp: Math.floor(Date.now() / 1000) + 600 });
  await page.evaluate((t) => window.Deskbell.identify({ identity_token: t }), token);
  await script(server, { text: 'Hello, verified user.' });
  await send(page, 'Who am I?');
  await assistant(page).last().getByText('Hello, verified user.').waitFor();
  assert.equal(minted.length, 1);
  assert.deepEqual(minted[0], { site: 'acme', identity_token: token });
  await page.context().close();
});

test('cancelling a card runs nothing and reads Cancelled', async () => {
  const page = await openWidget();
  await script(server, { tool_calls: [{ name: 'cancel_order', arguments: { order_id: 7 } }] });
  await send(page, 'Cancel order 7');
  const card = page.locator('deskbell-widget .card');
  await card.waitFor();
  const before = (await toolCalls(server)).length;
  await script(server, { text: 'All right, I left it.' });
  await card.getByRole('button', { name: /^Cancel/ }).click();
  await page.locator('deskbell-widget .step[data-status="cancelled"]').getByText('Cancelled').waitFor();
  await assistant(page).last().getByText('All right, I left it.').waitFor();
  assert.equal((await toolCalls(server)).length, before);
  await page.context().close();
});

test('the buttons are disabled while an answer is in flight', async () => {
  const page = await openWidget();
  await script(server, { tool_calls: [{ name: 'cancel_order', arguments: { order_id: 9 } }] });
  await send(page, 'Cancel order 9');
  const card = page.locator('deskbell-widget .card');
  await card.waitFor();
  await script(server, { text: 'Done.' });
  const confirm = card.getByRole('button', { name: /^Confirm/ });
  // Two quick clicks: the second must not send a second answer.
  await confirm.evaluate((b) => { b.click(); b.click(); });
  await page.locator('deskbell-widget .step[data-status="confirmed"]').waitFor();
  await assistant(page).last().getByText('Done.').waitFor();
  assert.equal(await page.locator('deskbell-widget .error').count(), 0, 'no second answer was refused');
  await page.context().close();
});

test('a card nobody answers in time reads Expired and has no buttons', async () => {
  const short = await startServer({ DESKBELL_ACTION_APPROVAL_TTL_MIN: '0.05' });
  const page = await openWidget(short);
  await script(short, { tool_calls: [{ name: 'cancel_order', arguments: { order_id: 5 } }] });
  await send(page, 'Cancel order 5');
  await page.locator('deskbell-widget .card').waitFor();
  const expired = page.locator('deskbell-widget .step[data-status="expired"]');
  await expired.waitFor({ timeout: 8000 });
  assert.match(await expired.innerText(), /Expired/);
  assert.equal(await page.locator('deskbell-widget .card button').count(), 0);
  await page.screenshot({ path: join(shots, 'expired.png') });
  // After a reload the history says the same.
  await page.reload();
  await page.locator('deskbell-widget .step[data-status="expired"]').waitFor();
  assert.equal(await page.locator('deskbell-widget .card').count(), 0);
  await page.context().close();
});

test('after a reload the history is shown and a pending card still works', async () => {
  const page = await openWidget();
  await script(server, { tool_calls: [{ name: 'lookup_order', arguments: { order_id: 42 } }] });
  await script(server, { tool_calls: [{ name: 'cancel_order', arguments: { order_id: 42 } }] });
  await send(page, 'Look up and cancel 42');
  await page.locator('deskbell-widget .card').waitFor();
  await page.reload();
  await page.locator('deskbell-widget .card').waitFor();
  assert.equal(await page.locator('deskbell-widget .msg.visitor').innerText(), 'Look up and cancel 42');
  assert.match(await page.locator('deskbell-widget .step[data-status="succeeded"]').innerText(), /Look up an order/);
  const before = (await toolCalls(server)).length;
  await script(server, { text: 'Cancelled after the reload.' });
  await page.locator('deskbell-widget .card').getByRole('button', { name: /^Confirm/ }).click();
  await assistant(page).last().getByText('Cancelled after the reload.').waitFor();
  assert.equal((await toolCalls(server)).length, before + 1);
  await page.context().close();
});

test('a new conversation starts empty and old cards are not answerable from it', async () => {
  const page = await openWidget();
  await script(server, { tool_calls: [{ name: 'cancel_order', arguments: { order_id: 3 } }] });
  await send(page, 'Cancel order 3');
  await page.locator('deskbell-widget .card').waitFor();
  await page.locator('deskbell-widget').getByRole('button', { name: 'Start a new conversation' }).click();
  assert.equal(await page.locator('deskbell-widget .card').count(), 0);
  assert.equal(await page.locator('deskbell-widget .msg.visitor').count(), 0);
  await page.reload();
  assert.equal(await page.locator('deskbell-widget .card').count(), 0, 'the new conversation is the one kept');
  await page.context().close();
});

test('host-page CSS that restyles everything leaves the widget intact', async () => {
  const page = await openWidget(server, '?hostile=1');
  await script(server, { text: 'Still readable.' });
  await send(page, 'hello');
  await assistant(page).last().getByText('Still readable.').waitFor();
  const style = await assistant(page).last().evaluate((el) => {
    const s = getComputedStyle(el);
    return { color: s.color, fontSize: s.fontSize, visibility: s.visibility };
  });
  assert.notEqual(style.color, 'rgb(255, 0, 0)');
  assert.equal(style.fontSize, '15px');
  assert.equal(style.visibility, 'visible');
  assert.ok(await page.locator('deskbell-widget button.launcher').isVisible());
  await page.screenshot({ path: join(shots, 'hostile-page.png') });
  await page.context().close();
});

test('HTML and javascript: links in an answer are rendered inert', async () => {
  const page = await openWidget();
  await script(server, { text: 'Look <img src=x onerror="window.__pwned=1"> and <script>window.__pwned=2</script> [click me](javascript:window.__pwned=3) or [docs](https://acme.example/help)' });
  await send(page, 'Show me');
  const bubble = assistant(page).last();
  await bubble.locator('a').waitFor();
  assert.equal(await bubble.locator('img, script').count(), 0);
  const links = await bubble.locator('a').evaluateAll((as) => as.map((a) => ({ href: a.href, rel: a.rel, text: a.textContent })));
  assert.deepEqual(links, [{ href: 'https://acme.example/help', rel: 'noopener noreferrer', text: 'docs' }]);
  await bubble.getByText('click me').click();
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  assert.match(await bubble.innerText(), /<img src=x/);
  await page.context().close();
});

test('errors are told in plain words', async () => {
  const page = await openWidget();
  for (let i = 0; i < 3; i++) await script(server, { status: 503 });
  await send(page, 'Anyone there?');
  const error = page.locator('deskbell-widget .error');
  await error.waitFor();
  assert.match(await error.innerText(), /unavailable right now/);
  await page.context().setOffline(true);
  await send(page, 'Offline?');
  await page.locator('deskbell-widget .error').nth(1).waitFor();
  assert.match(await page.locator('deskbell-widget .error').nth(1).innerText(), /offline/i);
  await page.context().setOffline(false);
  await page.context().close();
});

test('it works from the keyboard alone', async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`${server.page}/`);
  await page.locator('deskbell-widget button.launcher').waitFor();
  await page.locator('deskbell-widget button.launcher').focus();
  await page.keyboard.press('Enter');
  await page.locator('deskbell-widget textarea#deskbell-input').waitFor();
  assert.equal(await page.locator('deskbell-widget').evaluate((w) => w.shadowRoot.activeElement?.tagName), 'TEXTAREA');
  await page.keyboard.press('Escape');
  assert.equal(await page.locator('deskbell-widget').evaluate((w) => w.shadowRoot.activeElement?.className), 'launcher');
  assert.equal(await page.locator('deskbell-widget .panel').isHidden(), true);
  await context.close();
});

test('axe-core finds no accessibility violations', async () => {
  const page = await openWidget();
  await script(server, { tool_calls: [{ name: 'cancel_order', arguments: { order_id: 1 } }] });
  await send(page, 'Cancel order 1');
  await page.locator('deskbell-widget .card').waitFor();
  await page.addScriptTag({ content: axeSource });
  const result = await page.evaluate(async () => window.axe.run(document, { resultTypes: ['violations'] }));
  const summary = result.violations.map((v) => `${v.id}: ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
  assert.deepEqual(summary, []);
  await page.context().close();
});

test('only the Deskbell API is added to the page', async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`${server.page}/?bare=1`);
  const bare = await page.evaluate(() => Object.keys(window));
  await page.goto(`${server.page}/`);
  await page.locator('deskbell-widget button.launcher').waitFor();
  const added = (await page.evaluate(() => Object.keys(window))).filter((k) => !bare.includes(k));
  assert.deepEqual(added, ['Deskbell']);
  const api = await page.evaluate(() => Object.keys(window.Deskbell).sort());
  assert.deepEqual(api, ['close', 'identify', 'open', 'reset']);
  await page.evaluate(() => window.Deskbell.open());
  assert.equal(await page.locator('deskbell-widget .panel').isVisible(), true);
  await page.evaluate(() => window.Deskbell.close());
  assert.equal(await page.locator('deskbell-widget .panel').isHidden(), true);
  await context.close();
});

test('the widget is small and cached', async () => {
  const r = await fetch(`${server.api}/widget.js`);
  assert.equal(r.status, 200);
  const body = Buffer.from(await r.arrayBuffer());
  const gzipped = gzipSync(body, { level: 9 }).length;
  console.log(`widget.js: ${body.length} bytes, ${gzipped} bytes gzipped`);
  assert.ok(gzipped <= 25 * 1024, `${gzipped} bytes gzipped`);
  const etag = r.headers.get('etag');
  assert.ok(etag);
  assert.match(r.headers.get('cache-control'), /max-age/);
  const again = await fetch(`${server.api}/widget.js`, { headers: { 'if-none-match': etag } });
  assert.equal(again.status, 304);
  const pinned = await fetch(`${server.api}/widget/${etag.replaceAll('"', '')}.js`);
  assert.equal(pinned.status, 200);
  assert.match(pinned.headers.get('cache-control'), /immutable/);
});
