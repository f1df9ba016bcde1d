// One conversation: its messages as the visitor saw them and every tool call
// with its audit rows, so an operator can answer "what happened here" from one
// page. It redraws only when the conversation really changed, so a live update
// does not disturb reading or announce nothing new.

import { h, view, pageTitle, errorText, timeEl, announce, enc, idPart, num } from './dom.js';
import { POLICY_NAME } from './labels.js';
import { api } from './api.js';
import { siteName } from './state.js';
import { onLive, debounced } from './live.js';
import { bubble, stepLine } from './messages.js';
import { auditTable } from './audit.js';
import { deskPanel } from './desk.js';

export function pageConversation(ctx, id) {
  const meta = h('dl', { class: 'meta', id: 'conversation-meta' });
  const desk = h('div', { id: 'desk' });
  const messages = h('div', { class: 'log', id: 'messages' });
  const calls = h('div', { id: 'calls', class: 'calls' });
  const errors = h('div', { class: 'errors' });
  // The conversation as the API gives it, saved as one JSON file (issue 41).
  let current = null;
  const save = h('button', { type: 'button', class: 'secondary', id: 'export-conversation', text: 'Export as JSON', onclick: () => {
    if (!current) return;
    const blob = new Blob([JSON.stringify(current, null, 2) + '\n'], { type: 'application/json' });
    const a = h('a', { href: URL.createObjectURL(blob), download: `deskbell-${current.id}.json` });
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  } });
  view.append(
    h('p', { class: 'back' }, [h('a', { href: '#/conversations', text: '← All conversations' })]),
    pageTitle('Conversation'), errors, meta, h('p', {}, [save]), desk,
    h('section', { 'aria-labelledby': 'messages-title' }, [h('h2', { id: 'messages-title', text: 'Messages' }), messages]),
    h('section', { 'aria-labelledby': 'calls-title' }, [h('h2', { id: 'calls-title', text: 'Calls' }), calls]),
  );
  let shown = '';
  async function load(live) {
    try {
      const c = await api('GET', '/conversations/' + enc(id));
      if (!ctx.alive) return;
      errors.replaceChildren();
      const json = JSON.stringify(c);
      current = c;
      if (json === shown) return;
      shown = json;
      renderConversation(c, meta, messages, calls);
      desk.replaceChildren(deskPanel(c, () => load(false)));
      if (live) announce('This conversation was updated.');
    } catch (e) {
      if (!ctx.alive) return;
      errors.replaceChildren(errorText(e.status === 404 ? new Error('There is no conversation with this id.') : e));
    }
  }
  const refresh = debounced(ctx, () => load(true), 300);
  onLive(ctx, (d) => { if (!d || d.id === id) refresh(); });
  load(false);
}

function renderConversation(c, meta, messages, calls) {
  const row = (name, value) => h('div', {}, [h('dt', { text: name }), h('dd', {}, [value])]);
  meta.replaceChildren(
    row('Conversation', h('code', { text: c.id })),
    row('Site', siteName(c.site)),
    row('Visitor', h('code', { text: c.visitor })),
    row('User ID', c.user_id || 'Not verified'),
    row('Started', timeEl(c.started_at)),
    row('Tokens', `${num(c.usage?.input_tokens)} in, ${num(c.usage?.output_tokens)} out`),
  );
  messages.replaceChildren(...(c.messages.length ? c.messages.map(bubble) : [h('p', { class: 'muted', text: 'No messages yet.' })]));
  calls.replaceChildren(...(c.calls.length ? c.calls.map(callView) : [h('p', { class: 'muted', text: 'No tool calls in this conversation.' })]));
}

function callView(c) {
  const hid = 'call-' + idPart(c.call);
  const row = (name, value) => h('div', {}, [h('dt', { text: name }), h('dd', {}, [value ?? '—'])]);
  return h('article', { class: 'call', 'data-call': c.call, 'data-status': c.status, 'aria-labelledby': hid }, [
    h('h3', { id: hid }, [h('code', { text: c.tool }), ' · ' + c.label]),
    h('dl', { class: 'meta' }, [
      row('Call', h('code', { text: c.call })),
      row('Policy', POLICY_NAME[c.policy] || c.policy),
      row('Kind', c.kind === 'confirmation' ? 'Needs confirmation' : 'Ran automatically'),
      row('Status', stepLine(c.status, '', null)),
      row('Reason', c.reason),
      row('Requested', timeEl(c.created_at)),
      row('Decided', timeEl(c.decided_at)),
    ]),
    h('h4', { text: 'Arguments' }),
    h('pre', { class: 'json', text: JSON.stringify(c.arguments, null, 2) }),
    h('h4', { text: 'Audit rows' }),
    auditTable('audit-' + idPart(c.call), 'Audit rows of call ' + c.call, c.audit || [], true),
  ]);
}
