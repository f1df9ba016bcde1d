// The widget in the visitor's language (SPEC §22), its feedback thumbs and its
// transcript (issue 41), in real Chromium: a German site, an Arabic browser on
// a site that follows the browser (right to left, cards' lines isolated), an
// operator's override, a rating kept across a reload, and a downloaded
// transcript. Each page is checked by axe and photographed.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  root, startServer, stopServers, launchBrowser, script, send, assistant, axeViolations, screenshotDir,
} from './support.mjs';

const catalog = (code) => JSON.parse(readFileSync(join(root, 'src', 'locale', 'catalogs', `${code}.json`), 'utf8'));
const de = catalog('de');
const ar = catalog('ar');
const shots = screenshotDir('locale-screenshots');
let browser;
let german;
let auto;

before(async () => {
  german = await startServer({ DESKBELL_E2E_SITE: 'locale = "de"' });
  auto = await startServer({ DESKBELL_E2E_SITE: 'locale = "auto"\nstrings = { greeting = { ar = "أهلاً بك في متجر أكمي" } }' });
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  stopServers();
});

/** The widget open on a page whose browser speaks `locale`. */
async function open(srv, locale) {
  const context = await browser.newContext({ viewport: { width: 1100, height: 800 }, locale });
  const page = await context.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(e));
  await page.goto(`${srv.page}/`);
  await page.locator('deskbell-widget button.launcher').click();
  await page.locator('deskbell-widget textarea#deskbell-input').waitFor();
  return page;
}

const shadow = (page, selector) => page.locator(`deskbell-widget ${selector}`);

test('a German site speaks German on its card and keeps the signed lines as they are', async () => {
  const page = await open(german, 'en-US');
  assert.equal(await shadow(page, 'textarea').getAttribute('placeholder'), de.input_placeholder);
  assert.equal(await shadow(page, 'form button[type=submit]').innerText(), de.send);
  assert.equal(await shadow(page, '.root').getAttribute('lang'), 'de');
  await script(german, { tool_calls: [{ name: 'cancel_order', arguments: { order_id: 4711, reason: 'Zu spät' } }] });
  await send(page, 'Bitte Bestellung 4711 stornieren');
  const card = shadow(page, '.card');
  await card.waitFor();
  assert.equal(await card.locator('button.confirm').innerText(), de.card_confirm);
  assert.equal(await card.locator('button.cancel').innerText(), de.card_cancel);
  assert.equal(await card.getAttribute('aria-label'), de.card_label.replace('{label}', 'Cancel an order'));
  // The lines the server signed are shown as signed: the tool's own words.
  assert.match(await card.locator('dl').innerText(), /Order ID\s+4711/);
  assert.match(await card.locator('.left').innerText(), new RegExp(de.card_expires_in.split('{time}')[0]));
  assert.deepEqual(await axeViolations(page), []);
  await page.screenshot({ path: join(shots, 'german-card.png') });
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('an Arabic browser gets the Arabic widget right to left with each line isolated', async () => {
  const page = await open(auto, 'ar-EG');
  const rootEl = shadow(page, '.root');
  assert.equal(await rootEl.getAttribute('dir'), 'rtl');
  assert.equal(await rootEl.getAttribute('lang'), 'ar');
  assert.equal(await shadow(page, '.greeting').innerText(), 'أهلاً بك في متجر أكمي', 'the operator\'s override');
  assert.equal(await shadow(page, 'textarea').getAttribute('placeholder'), ar.input_placeholder);
  await script(auto, { tool_calls: [{ name: 'cancel_order', arguments: { order_id: 42, reason: 'late delivery' } }] });
  await send(page, 'ألغِ الطلب 42');
  const card = shadow(page, '.card');
  await card.waitFor();
  assert.equal(await card.locator('button.confirm').innerText(), ar.card_confirm);
  assert.equal(await card.locator('dd bdi').count(), 2, 'each value is isolated from the text around it');
  assert.equal(await card.locator('dt bdi').first().innerText(), 'Order ID');
  assert.deepEqual(await axeViolations(page), []);
  await page.screenshot({ path: join(shots, 'arabic-card.png') });
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('an English browser on the same site gets English', async () => {
  const page = await open(auto, 'en-GB');
  assert.equal(await shadow(page, '.root').getAttribute('dir'), 'ltr');
  assert.equal(await shadow(page, 'textarea').getAttribute('placeholder'), 'Write a message…');
  await page.context().close();
});

test('a visitor rates an answer with a comment and sees the rating again after a reload', async () => {
  const page = await open(german, 'de-DE');
  await script(german, { text: 'Rücksendungen sind 30 Tage möglich.' });
  await send(page, 'Wie lange kann ich zurücksenden?');
  const answer = assistant(page).last();
  await answer.getByText('Rücksendungen').waitFor();
  const down = answer.getByRole('button', { name: de.feedback_not_helpful, exact: true });
  await down.click();
  await answer.getByText(de.feedback_thanks).waitFor();
  assert.equal(await down.getAttribute('aria-pressed'), 'true');
  await answer.locator('textarea.comment').fill('Welche Tage zählen?');
  await answer.getByRole('button', { name: de.feedback_send }).click();
  await answer.locator('textarea.comment').waitFor({ state: 'hidden' });
  assert.deepEqual(await axeViolations(page), []);
  await page.screenshot({ path: join(shots, 'german-feedback.png') });
  await page.reload();
  await page.locator('deskbell-widget textarea#deskbell-input').waitFor();
  const again = assistant(page).last();
  await again.getByText('Rücksendungen').waitFor();
  assert.equal(await again.getByRole('button', { name: de.feedback_not_helpful, exact: true }).getAttribute('aria-pressed'), 'true');
  assert.equal(await again.getByRole('button', { name: de.feedback_helpful, exact: true }).getAttribute('aria-pressed'), 'false');
  assert.deepEqual(page.errors, []);
  await page.context().close();
});

test('the visitor downloads the conversation as a printable page in their language', async () => {
  const page = await open(german, 'de-DE');
  await script(german, { tool_calls: [{ name: 'lookup_order', arguments: { order_id: 7 } }] });
  await script(german, { text: 'Wir liefern in <3 Tagen & kostenlos.' });
  await send(page, 'Wie schnell liefert ihr?');
  await assistant(page).last().getByText('kostenlos').waitFor();
  const saved = page.waitForEvent('download');
  await shadow(page, 'button.transcript').click();
  const download = await saved;
  assert.match(download.suggestedFilename(), /^conversation-c_.*\.html$/);
  const html = readFileSync(await download.path(), 'utf8');
  assert.match(html, /^<!doctype html>/);
  assert.match(html, /<html lang="de" dir="ltr">/);
  assert.ok(html.includes('Wie schnell liefert ihr?'), html);
  assert.ok(html.includes('Wir liefern in &lt;3 Tagen &amp; kostenlos.'), 'text is escaped, never markup');
  assert.ok(html.includes(de.transcript_visitor) && html.includes(de.transcript_assistant));
  assert.ok(html.includes('Look up an order'), 'the steps are in the transcript');
  assert.deepEqual(page.errors, []);
  await page.context().close();
});
