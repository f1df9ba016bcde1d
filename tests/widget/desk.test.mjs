// The human desk end to end (SPEC §19): a visitor in the widget and an operator
// in the console, two real browsers on one server. The visitor asks for a
// person; the operator sees the queue's badge, takes over and replies; the
// reply reaches the widget live under the operator's name; the visitor's next
// message reaches the console and not the model; after the release the
// assistant answers again, told that a person handled the conversation.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, stopServers, launchBrowser, script, send, assistant, axeViolations } from './support.mjs';

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

const requests = async () => (await fetch(`${server.page}/__requests`)).json();

async function consolePage() {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.problems = [];
  page.on('pageerror', (e) => page.problems.push(`page error: ${e.message}`));
  await page.goto(`${server.api}/console`);
  await page.locator('#signin-email').fill(server.operator.email);
  await page.locator('#signin-password').fill(server.operator.password);
  await page.locator('#signin-submit').click();
  await page.locator('#view h1', { hasText: 'Conversations' }).waitFor();
  return page;
}

/** The widget on a 390 px wide phone, opened. */
async function phoneWidget() {
  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
  const page = await context.newPage();
  page.problems = [];
  page.on('pageerror', (e) => page.problems.push(`page error: ${e.message}`));
  await page.goto(`${server.page}/`);
  await page.locator('deskbell-widget button.launcher').click();
  await page.locator('deskbell-widget textarea#deskbell-input').waitFor();
  return page;
}

test('a visitor reaches a person, the person replies, and the assistant takes the conversation back', async () => {
  const operator = await consolePage();
  const visitor = await phoneWidget();

  await script(server, { text: 'Hello! How can I help?' });
  await send(visitor, 'Hi');
  await assistant(visitor).filter({ hasText: 'How can I help' }).waitFor();
  const person = visitor.locator('deskbell-widget button.person');
  await person.click();
  await visitor.locator('deskbell-widget .holder', { hasText: 'Waiting for a person' }).waitFor();

  // The console's nav badge and title count the waiting conversation.
  await operator.locator('#queue-badge', { hasText: '1' }).waitFor();
  assert.match(await operator.title(), /^\(1\) /);
  await operator.locator('#nav a[data-nav="queue"]').click();
  const row = operator.locator('#queue tbody tr').first();
  await row.locator('td', { hasText: 'Waiting' }).waitFor();
  await row.locator('a').click();
  await operator.locator('#takeover').click();
  await operator.locator('#reply-text').fill("Hi, I'm Ada. Let me look at your order.");
  // The visitor sees the operator typing before the reply comes.
  await visitor.locator('deskbell-widget .typing', { hasText: 'Ada is typing' }).waitFor();
  await operator.locator('#reply button[type="submit"]').click();

  // The reply reaches the widget live, under the operator's display name.
  const reply = visitor.locator('deskbell-widget .msg.operator:not(.typing)');
  await reply.filter({ hasText: 'Let me look at your order' }).waitFor();
  assert.equal(await reply.locator('.who').textContent(), 'Ada');
  await visitor.locator('deskbell-widget .holder', { hasText: "You're chatting with Ada" }).waitFor();
  assert.equal(await person.isHidden(), true);

  // An operator's text is plain text: no HTML, no Markdown, no javascript: link.
  const hostile = '<b>bold</b> <img src=x onerror=alert(1)> [click](javascript:alert(1)) **loud**';
  await operator.locator('#reply-text').fill(hostile);
  await operator.locator('#reply button[type="submit"]').click();
  const plain = reply.filter({ hasText: 'click' });
  await plain.waitFor();
  assert.equal(await plain.locator('.body').textContent(), hostile);
  assert.equal(await plain.locator('b, img, a, strong').count(), 0);

  // The visitor's next message goes to the person: the console shows it, the model is not asked.
  const asked = (await requests()).count;
  await send(visitor, 'It is order 42, it never arrived.');
  await operator.locator('.msg.visitor', { hasText: 'never arrived' }).waitFor();
  assert.equal((await requests()).count, asked, 'the model was asked while a person held the conversation');

  assert.deepEqual(await axeViolations(operator), []);
  assert.deepEqual(await axeViolations(visitor), []);

  // Back to the assistant: the widget says so live, and the model is told the human segment is settled.
  await operator.locator('#release').click();
  await visitor.locator('deskbell-widget .step', { hasText: 'Back with the assistant' }).waitFor();
  await script(server, { text: 'Glad Ada could help.' });
  await send(visitor, 'Thanks!');
  await assistant(visitor).filter({ hasText: 'Glad Ada could help' }).waitFor();
  const last = JSON.stringify((await requests()).last);
  assert.ok(last.includes('Ada — a person from the support team — wrote:'), last);
  assert.ok(last.includes('What they settled with the visitor is settled'), last);

  assert.deepEqual(operator.problems, []);
  assert.deepEqual(visitor.problems, []);
});
