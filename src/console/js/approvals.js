// Approvals beyond the visitor (SPEC §20): the calls that wait for a
// teammate, oldest first, each with its argument lines, the time left, an
// optional note and Approve / Decline, and the nav badge that counts them. A
// re-read keeps the element of every call still waiting, so a live change
// never wipes a note being written or takes the focus away.

import { h, view, pageTitle, errorText, announce, enc, idPart, timeEl, field } from './dom.js';
import { api } from './api.js';
import { siteName } from './state.js';
import { POLICY_NAME } from './labels.js';
import { onLive, debounced } from './live.js';

let waitingBefore = 0;

/** Keeps the nav badge in step with the calls waiting for a teammate. */
export async function watchApprovals() {
  let a;
  try { a = await api('GET', '/approvals'); } catch { return; }
  const n = a.items.length;
  const badge = document.getElementById('approvals-badge');
  if (badge) {
    // The count reads as words to a screen reader: the link says "Approvals 2 waiting".
    badge.replaceChildren(...(n ? [String(n), h('span', { class: 'sr', text: ' waiting' })] : []));
    badge.hidden = !n;
  }
  if (n > waitingBefore) announce(`${n} call${n === 1 ? '' : 's'} waiting for approval.`);
  waitingBefore = n;
}

/** Refreshes the badge on every live change, and every 10 seconds besides. */
export function startApprovalsWatch(listeners) {
  const tick = () => watchApprovals();
  listeners.add(tick);
  const timer = setInterval(tick, 10000);
  tick();
  return () => { listeners.delete(tick); clearInterval(timer); waitingBefore = 0; };
}

/** "12 min", "1 h 5 min", "40 s"; '' once the time is up. */
function timeLeft(iso) {
  const s = Math.round((Date.parse(iso) - Date.now()) / 1000);
  if (!(s > 0)) return '';
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.ceil(s / 60)} min`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

const row = (name, value) => h('div', {}, [h('dt', { text: name }), h('dd', {}, [value])]);

/** One waiting call: its facts, its lines, a note and the two decisions. */
function approvalItem(item, decide) {
  const key = idPart(item.call);
  const left = h('span', { class: 'time-left' });
  const note = h('textarea', { id: `note-${key}`, rows: '2', maxlength: '1000', disabled: !item.can_approve });
  // Why the buttons are off is said beside them, and tied to them for screen readers.
  const roles = (item.approvers || []).join(' or ');
  const why = item.can_approve ? null : h('p', { id: `why-${key}`, class: 'muted small why', text: `Only an operator with the role ${roles} can approve or decline this call.` });
  const button = (text, cls, decision) => h('button', {
    type: 'button', class: cls, text, disabled: !item.can_approve, 'aria-describedby': why ? `why-${key}` : null,
    onclick: (e) => decide(s, decision, e.currentTarget),
  });
  const approve = button('Approve', 'approve', 'approve');
  const decline = button('Decline', 'secondary decline', 'decline');
  const error = h('div', { class: 'approval-error' });
  const lines = item.arguments || [];
  const el = h('article', { class: 'approval', 'data-call': item.call, 'aria-labelledby': `approval-${key}` }, [
    h('h2', { id: `approval-${key}`, tabindex: '-1', text: item.label }),
    h('dl', { class: 'meta' }, [
      row('Site', siteName(item.site)),
      row('Conversation', h('a', { href: '#/conversations/' + enc(item.conversation), text: item.conversation })),
      row('Tool', h('code', { text: item.tool })),
      row('Policy', POLICY_NAME[item.policy] || item.policy),
      row('Requested', timeEl(item.requested_at)),
      row('Time left', left),
    ]),
    h('h3', { text: 'Arguments' }),
    lines.length ? h('dl', { class: 'args' }, lines.map((l) => row(l.name, l.value))) : h('p', { class: 'muted', text: 'No arguments.' }),
    field('Note (optional)', note),
    why, h('div', { class: 'actions' }, [approve, decline]), error,
  ]);
  const s = {
    item, el, note, error,
    lock(on) { approve.disabled = decline.disabled = note.disabled = on || !item.can_approve; },
    tick() {
      const t = timeLeft(item.expires_at);
      left.textContent = t || 'Expired';
      // An expired call can no longer be decided; the next read drops it.
      if (!t) s.lock(true);
    },
  };
  s.tick();
  return s;
}

// What an error of a decision means for the operator; `gone` ones take the call off the list.
const REFUSED = {
  confirmation_expired: { gone: true, say: (l) => `“${l}” expired before it was decided, so nothing ran.` },
  call_not_pending: { gone: true, say: (l) => `“${l}” was already decided, or closed, elsewhere.` },
  signature_invalid: { gone: true, say: (l) => `“${l}” changed since this page read it. The list was read again.` },
  forbidden: { gone: false, say: () => 'Your role may not approve or decline this call.' },
};

export function pageApprovals(ctx) {
  const list = h('div', { id: 'approval-list', class: 'approvals' });
  const empty = h('p', { id: 'approvals-empty', class: 'muted', text: 'No call is waiting for approval.', hidden: true });
  const status = h('p', { id: 'approval-status', class: 'approval-status', role: 'status', 'aria-live': 'polite' });
  const errors = h('div');
  const title = pageTitle('Approvals');
  view.append(title,
    h('p', { class: 'muted' }, ['Calls that wait for a teammate’s approval before they run, the oldest first.']),
    status, errors, empty, list);
  const shown = new Map(); // call id → the item on screen

  // Takes a call off the list; focus that was in it moves to the next call, or to the title.
  function drop(call, hadFocus) {
    const s = shown.get(call);
    if (!s) return;
    hadFocus ||= s.el.contains(document.activeElement);
    const next = s.el.nextElementSibling;
    s.el.remove(); shown.delete(call);
    empty.hidden = shown.size > 0;
    if (hadFocus) (next?.querySelector('h2') || title).focus();
  }

  async function load() {
    try {
      const { items } = await api('GET', '/approvals');
      if (!ctx.alive) return;
      errors.replaceChildren();
      const waiting = new Set(items.map((i) => i.call));
      // A call being decided here leaves when its answer comes, which says what happened.
      for (const [call, s] of [...shown]) if (!waiting.has(call) && !s.deciding) drop(call);
      // A call asked for later than those shown comes after them, as the list is oldest first.
      for (const item of items) {
        if (shown.has(item.call)) continue;
        const s = approvalItem(item, decide);
        shown.set(item.call, s); list.append(s.el);
      }
      empty.hidden = shown.size > 0;
    } catch (e) { if (ctx.alive) errors.replaceChildren(errorText(e)); }
  }

  async function decide(s, decision, button) {
    const { item } = s;
    // The button is about to be disabled, which takes its focus: where the focus goes is settled below.
    const hadFocus = s.el.contains(document.activeElement);
    s.deciding = true;
    s.lock(true);
    s.error.replaceChildren();
    const body = { decision, signature: item.signature };
    if (s.note.value.trim()) body.note = s.note.value.trim();
    try {
      const r = await api('POST', '/approvals/' + enc(item.call), body);
      if (!ctx.alive) return;
      drop(item.call, hadFocus);
      status.textContent = r.status === 'confirmed'
        ? `Approved “${item.label}”: it runs now, and the visitor is told.`
        : `Declined “${item.label}”: nothing runs, and the visitor is told.`;
      watchApprovals();
    } catch (e) {
      if (!ctx.alive) return;
      const known = REFUSED[e.code];
      if (known?.gone) { drop(item.call, hadFocus); status.textContent = known.say(item.label); load(); watchApprovals(); return; }
      s.error.replaceChildren(errorText(known ? new Error(known.say(item.label)) : e));
      s.deciding = false;
      s.lock(false);
      if (hadFocus) button.focus();
    }
  }

  const refresh = debounced(ctx, load, 200);
  onLive(ctx, refresh);
  const reread = setInterval(load, 10000);
  const ticker = setInterval(() => { for (const s of shown.values()) s.tick(); }, 1000);
  ctx.cleanups.push(() => { clearInterval(reread); clearInterval(ticker); });
  load();
}
