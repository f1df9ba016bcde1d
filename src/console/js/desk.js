// The human desk in the console (SPEC §19): the queue page, the nav badge,
// title count and sound when someone waits, and the conversation page's
// panel to take over, reply, release and cancel a pending card. An operator
// never answers a card in the visitor's name: there is no Confirm here.

import { h, view, pageTitle, errorText, announce, enc, table, emptyRow } from './dom.js';
import { api } from './api.js';
import { siteName } from './state.js';
import { onLive, debounced } from './live.js';

const TITLE = 'Deskbell console';
// A reply being written survives the panel's redraw on a live change.
const drafts = new Map();
let waitingBefore = 0;

/** Keeps the nav badge, the page title and a chime in step with the queue. */
export async function watchQueue() {
  let q;
  try { q = await api('GET', '/queue'); } catch { return; }
  const badge = document.getElementById('queue-badge');
  if (badge) {
    badge.textContent = q.waiting ? String(q.waiting) : '';
    badge.hidden = !q.waiting;
    badge.setAttribute('aria-label', `${q.waiting} waiting`);
  }
  const base = document.title.replace(/^\(\d+\) /, '');
  document.title = q.waiting ? `(${q.waiting}) ${base}` : base;
  if (q.waiting > waitingBefore) { chime(); announce(`${q.waiting} waiting for a person.`); }
  waitingBefore = q.waiting;
}

function chime() {
  try {
    const ctx = new (window.AudioContext || window.webkitAudioContext)();
    const osc = ctx.createOscillator(); const gain = ctx.createGain();
    osc.frequency.value = 880; gain.gain.value = 0.05;
    osc.connect(gain); gain.connect(ctx.destination);
    osc.start(); osc.stop(ctx.currentTime + 0.15);
  } catch { /* no sound where the browser allows none */ }
}

const wait = (s) => (s < 60 ? `${s} s` : s < 3600 ? `${Math.floor(s / 60)} min` : `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`);

export function pageQueue(ctx) {
  const body = h('tbody');
  const errors = h('div');
  const who = h('p', { class: 'muted', id: 'presence' });
  view.append(pageTitle('Queue'), who, errors,
    table('queue', 'Conversations with a person or waiting for one, the longest waiting first',
      ['Conversation', 'Site', 'With', 'Waiting', 'Unread'], body));
  async function load() {
    try {
      const [q, p] = await Promise.all([api('GET', '/queue'), api('GET', '/presence')]);
      if (!ctx.alive) return;
      errors.replaceChildren();
      who.textContent = p.online ? `At the desk: ${p.names.join(', ')}` : 'Nobody is at the desk.';
      body.replaceChildren(...(q.items.length ? q.items.map((i) => h('tr', { 'data-conversation': i.conversation }, [
        h('td', {}, [h('a', { href: '#/conversations/' + enc(i.conversation), text: i.conversation })]),
        h('td', { text: siteName(i.site) }),
        h('td', { text: i.holder === 'queue' ? 'Waiting' : (i.mine ? 'You' : i.name) }),
        h('td', { text: wait(i.waiting_s) }),
        h('td', {}, [i.unread ? h('span', { class: 'badge warn', text: String(i.unread) }) : '0']),
      ])) : [emptyRow(5, 'Nobody is waiting.')]));
    } catch (e) { if (ctx.alive) errors.replaceChildren(errorText(e)); }
  }
  const refresh = debounced(ctx, load, 200);
  onLive(ctx, refresh);
  const timer = setInterval(load, 15000);
  ctx.cleanups.push(() => clearInterval(timer));
  load();
}

/** The desk's panel on a conversation's page; `reload` redraws the page. */
export function deskPanel(c, reload) {
  const status = c.holder === 'queue' ? 'Waiting for a person'
    : c.holder === 'operator' ? (c.held_by_you ? 'You hold this conversation' : `Held by ${c.holder_name}`)
      : 'With the assistant';
  const errors = h('div');
  const act = async (path, body, said) => {
    try { await api('POST', `/conversations/${enc(c.id)}/${path}`, body); announce(said); reload(); }
    catch (e) { errors.replaceChildren(errorText(e)); }
  };
  const kids = [h('h2', { id: 'desk-title', text: 'Desk' }), h('p', { id: 'holder', text: status })];
  if (c.contact) kids.push(h('p', {}, ['Email left by the visitor: ', h('a', { href: 'mailto:' + c.contact, text: c.contact })]));
  if (!c.held_by_you) kids.push(h('button', { type: 'button', id: 'takeover', text: 'Take over', onclick: () => act('takeover', {}, 'You hold this conversation.') }));
  if (c.held_by_you) {
    const text = h('textarea', { id: 'reply-text', rows: '3', maxlength: '4000' });
    const hadFocus = document.activeElement?.id === 'reply-text';
    text.value = drafts.get(c.id) || '';
    if (hadFocus) queueMicrotask(() => text.focus());
    text.addEventListener('input', () => drafts.set(c.id, text.value));
    // The visitor sees "… is typing", at most every three seconds.
    let typed = 0;
    text.addEventListener('input', () => {
      if (Date.now() - typed < 3000) return;
      typed = Date.now();
      api('POST', `/conversations/${enc(c.id)}/typing`).catch(() => {});
    });
    const form = h('form', { id: 'reply', class: 'reply' }, [
      h('label', { for: 'reply-text', text: 'Reply to the visitor' }), text, h('button', { type: 'submit', text: 'Send reply' }),
    ]);
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      if (!text.value.trim()) return;
      drafts.delete(c.id);
      act('messages', { text: text.value }, 'Reply sent.');
    });
    kids.push(form);
  }
  if (c.holder !== 'assistant') kids.push(h('button', { type: 'button', id: 'release', text: 'Back to the assistant', onclick: () => act('release', {}, 'The assistant has the conversation again.') }));
  for (const call of c.calls.filter((x) => x.status === 'pending' && x.kind === 'confirmation')) {
    kids.push(h('button', { type: 'button', class: 'cancel-card', 'data-call': call.call, text: `Cancel the card: ${call.label}`, onclick: () => act(`calls/${enc(call.call)}/cancel`, {}, 'The card was cancelled.') }));
  }
  kids.push(errors);
  return h('section', { class: 'desk', 'aria-labelledby': 'desk-title' }, kids);
}

/** Refreshes the badge on every live change, and every 15 seconds besides. */
export function startQueueWatch(listeners) {
  const tick = () => watchQueue();
  listeners.add(tick);
  const timer = setInterval(tick, 15000);
  tick();
  return () => { listeners.delete(tick); clearInterval(timer); waitingBefore = 0; document.title = document.title.replace(/^\(\d+\) /, '') || TITLE; };
}
