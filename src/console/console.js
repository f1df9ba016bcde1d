// Deskbell operator console: one page over the operator API (docs/operator-api.md).
// Plain DOM and no build step. Everything the API returns is untrusted text: it
// reaches the page only through textContent and attributes, never as HTML.

const API = '/v1/operator';
const view = document.getElementById('view');
const state = { operator: null, csrf: null, sites: [], events: null, eventsOpened: false, listeners: new Set() };
let current = null; // The page on screen: { alive, cleanups }.

const POLICY = { off: 'Off', auto: 'Runs automatically', confirm: 'Needs confirmation' };
const STATUS = { answered: 'Answered', awaiting_confirmation: 'Awaiting confirmation', failed: 'Failed', streaming: 'Streaming', sent: 'Sent' };
const EVENTS = ['requested', 'confirmed', 'cancelled', 'expired', 'executed', 'failed', 'refused', 'tool_changed'];
const EVENT_LABEL = { requested: 'Requested', confirmed: 'Confirmed', cancelled: 'Cancelled', expired: 'Expired', executed: 'Executed', failed: 'Failed', refused: 'Refused', tool_changed: 'Tool changed' };
// Step lines read as in the widget: a mark (hidden from screen readers) and a word.
const STEP = {
  running: ['…', '', 'Running…'], succeeded: ['✓', 'ok', 'Succeeded'], failed: ['✗', 'bad', 'Failed'],
  refused: ['✗', 'bad', 'Refused'], confirmed: ['✓', 'ok', 'Confirmed'], cancelled: ['', '', 'Cancelled'],
  expired: ['', '', 'Expired'], pending: ['', '', 'Waiting for the visitor'],
};

// ---- DOM helpers ------------------------------------------------------------------

/** Builds an element; `text` sets textContent, functions become listeners. */
function h(tag, attrs, kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'text') el.textContent = String(v);
    else if (k === 'class') el.className = v;
    else if (typeof v === 'function') el.addEventListener(k.replace(/^on/, ''), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of [].concat(kids ?? [])) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

/** A safe id fragment from API data (site ids, tool names, call ids). */
const idPart = (s) => String(s).replace(/[^A-Za-z0-9_-]/g, '_');
const enc = encodeURIComponent;
const siteName = (id) => (state.sites.find((s) => s.id === id) || {}).name || id;
const isAdmin = () => state.operator?.role === 'admin';
const num = (n) => (typeof n === 'number' ? n.toLocaleString('en') : '—');

function fmtTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  return isNaN(d) ? String(iso) : d.toLocaleString('en-GB', { dateStyle: 'medium', timeStyle: 'medium' });
}
const timeEl = (iso) => (iso ? h('time', { datetime: iso, text: fmtTime(iso) }) : '—');

function qs(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== '' && v !== null && v !== undefined && v !== false) q.set(k, String(v));
  const s = q.toString();
  return s ? '?' + s : '';
}

/** A datetime-local value (local time) as RFC 3339 UTC, or '' when empty or invalid. */
function toRfc3339(value) {
  if (!value) return '';
  const d = new Date(value);
  return isNaN(d) ? '' : d.toISOString();
}

function announce(text) {
  // Clearing first makes a repeated message be announced again.
  const el = document.getElementById('announce');
  el.textContent = '';
  setTimeout(() => { el.textContent = text; }, 60);
}

function field(label, control, cls) {
  return h('div', { class: 'field' + (cls ? ' ' + cls : '') }, [h('label', { for: control.id, text: label }), control]);
}
function checkField(label, control) {
  return h('div', { class: 'field check' }, [control, h('label', { for: control.id, text: label })]);
}
function select(id, options, value) {
  return h('select', { id, name: id }, options.map(([v, t]) => h('option', { value: v, text: t, selected: v === value })));
}
const siteOptions = (any) => (any ? [['', 'All sites']] : []).concat(state.sites.map((s) => [s.id, s.name || s.id]));

/** A table in its own scrolling box, so wide tables never widen the page. */
function table(id, caption, headers, tbody) {
  const t = h('table', { id }, [
    h('caption', { text: caption }),
    h('thead', {}, [h('tr', {}, headers.map((x) => h('th', { scope: 'col', text: x })))]),
    tbody,
  ]);
  return h('div', { class: 'table-wrap', role: 'region', 'aria-label': caption, tabindex: '0' }, [t]);
}
const emptyRow = (cols, text) => h('tr', { class: 'empty' }, [h('td', { colspan: String(cols), text })]);

function errorText(e) {
  return h('p', { class: 'error-text', role: 'alert', text: e?.message || String(e) });
}
function badge(text, tone) { return h('span', { class: 'badge' + (tone ? ' ' + tone : ''), text }); }
function statusBadge(status) {
  if (!status) return '—';
  const tone = { answered: 'ok', awaiting_confirmation: 'warn', failed: 'bad' }[status];
  return badge(STATUS[status] || status, tone);
}

// ---- the API ------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message, retryAfter) {
    super(message);
    this.status = status; this.code = code; this.retryAfter = retryAfter;
  }
}

async function api(method, path, body) {
  const init = { method, credentials: 'same-origin', headers: { accept: 'application/json' } };
  if (body !== undefined) { init.headers['content-type'] = 'application/json'; init.body = JSON.stringify(body); }
  if (method !== 'GET' && state.csrf) init.headers['x-deskbell-csrf'] = state.csrf;
  let r;
  try { r = await fetch(API + path, init); } catch (e) {
    throw new ApiError(0, 'network', 'The server could not be reached. Check your connection and try again.');
  }
  if (r.status === 204) return null;
  const j = await r.json().catch(() => null);
  if (!r.ok) {
    const code = j?.error?.code || 'http_' + r.status;
    const err = new ApiError(r.status, code, j?.error?.message || `The server answered ${r.status}.`, r.headers.get('retry-after'));
    // Any call finding the session gone (expired, revoked) returns to the sign-in form.
    if (code === 'operator_unauthenticated' && path !== '/session') sessionEnded();
    throw err;
  }
  return j;
}

// ---- live changes -----------------------------------------------------------------

function openEvents() {
  closeEvents();
  if (!window.EventSource) return;
  const es = new EventSource(API + '/events');
  es.addEventListener('conversation', (ev) => {
    let d; try { d = JSON.parse(ev.data); } catch { return; }
    for (const fn of state.listeners) fn(d);
  });
  // After a reconnect some changes may have been missed: pages refresh as for any change.
  es.addEventListener('open', () => {
    if (state.eventsOpened) for (const fn of state.listeners) fn(null);
    state.eventsOpened = true;
  });
  state.events = es;
}
function closeEvents() {
  state.events?.close();
  state.events = null; state.eventsOpened = false;
}
/** Calls `fn(change)` on every live change while the page `ctx` is shown; `null` means "maybe missed some". */
function onLive(ctx, fn) {
  state.listeners.add(fn);
  ctx.cleanups.push(() => state.listeners.delete(fn));
}
function debounced(ctx, fn, ms) {
  let timer = null;
  ctx.cleanups.push(() => clearTimeout(timer));
  return () => { clearTimeout(timer); timer = setTimeout(fn, ms); };
}

// ---- signing in and out ---------------------------------------------------------------

function showSignIn(message) {
  closeEvents();
  leavePage();
  state.operator = null; state.csrf = null;
  document.body.removeAttribute('data-role');
  document.getElementById('top').hidden = true;
  view.hidden = true; view.replaceChildren();
  document.getElementById('signin').hidden = false;
  document.getElementById('signin-error').textContent = message || '';
  document.title = 'Sign in · Deskbell console';
}

function sessionEnded() {
  if (!state.operator) return;
  showSignIn('Your session has ended. Please sign in again.');
  document.getElementById('signin-email').focus();
}

function signInMessage(e) {
  if (e.code === 'login_failed') return 'The email or password is wrong. Check them and try again.';
  if (e.code === 'rate_limited') {
    const s = Number(e.retryAfter);
    const wait = s > 0 ? `in ${Math.ceil(s / 60)} minute${Math.ceil(s / 60) === 1 ? '' : 's'}` : 'later';
    return `Too many failed sign-ins. Please try again ${wait}.`;
  }
  return e.message;
}

async function onSignIn(ev) {
  ev.preventDefault();
  const email = document.getElementById('signin-email');
  const password = document.getElementById('signin-password');
  const error = document.getElementById('signin-error');
  const button = document.getElementById('signin-submit');
  error.textContent = '';
  if (!email.value.trim() || !password.value) {
    error.textContent = 'Enter your email and password.';
    (email.value.trim() ? password : email).focus();
    return;
  }
  button.disabled = true;
  try {
    const session = await api('POST', '/session', { email: email.value.trim(), password: password.value });
    password.value = '';
    await signedIn(session, true);
  } catch (e) {
    error.textContent = signInMessage(e);
    password.select();
  } finally {
    button.disabled = false;
  }
}

async function signedIn(session, moveFocus) {
  state.operator = session.operator;
  state.csrf = session.csrf;
  document.body.dataset.role = session.operator.role;
  document.getElementById('whoami').textContent = `${session.operator.email} (${session.operator.role})`;
  document.getElementById('signin').hidden = true;
  document.getElementById('signin-error').textContent = '';
  document.getElementById('top').hidden = false;
  view.hidden = false;
  try { state.sites = (await api('GET', '/sites')).items; } catch { state.sites = []; }
  if (!state.operator) return; // The session ended while the sites loaded.
  openEvents();
  // A hash that is not a page (an old #main) would leave the view empty: start on the list.
  if (!location.hash.startsWith('#/')) history.replaceState(null, '', '#/conversations');
  route(moveFocus);
}

async function signOut() {
  await api('DELETE', '/session').catch(() => {});
  showSignIn('');
  announce('You are signed out.');
  document.getElementById('signin-email').focus();
}

// ---- routing ----------------------------------------------------------------------

const ROUTES = [
  [/^#\/conversations\/?$/, 'conversations', pageConversations],
  [/^#\/conversations\/([^/]+)$/, 'conversations', pageConversation],
  [/^#\/audit\/?$/, 'audit', pageAudit],
  [/^#\/tools\/?$/, 'tools', pageTools],
  [/^#\/knowledge\/?$/, 'knowledge', pageKnowledge],
  [/^#\/usage\/?$/, 'usage', pageUsage],
];

function leavePage() {
  if (!current) return;
  current.alive = false;
  for (const fn of current.cleanups) { try { fn(); } catch { /* a failed cleanup must not block the next page */ } }
  current = null;
}

function route(moveFocus) {
  if (!state.operator) return;
  // Hashes that are not pages (the skip link's #main) leave the page as it is.
  if (location.hash && !location.hash.startsWith('#/')) return;
  let match = null;
  for (const [re, nav, fn] of ROUTES) {
    const m = re.exec(location.hash);
    if (m) { match = { nav, fn, args: m.slice(1).map(decodeURIComponent) }; break; }
  }
  if (!match) {
    history.replaceState(null, '', '#/conversations');
    match = { nav: 'conversations', fn: pageConversations, args: [] };
  }
  leavePage();
  current = { alive: true, cleanups: [] };
  view.replaceChildren();
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.dataset.nav === match.nav) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  match.fn(current, ...match.args);
  if (moveFocus) view.querySelector('h1')?.focus();
}

function pageTitle(text) {
  document.title = `${text} · Deskbell console`;
  return h('h1', { tabindex: '-1', text });
}

// ---- safe Markdown, as the widget renders it: builds nodes, never parses HTML ----------

function safeUrl(u) {
  try { const p = new URL(u, location.origin); return /^(https?|mailto):$/.test(p.protocol) ? p.href : null; } catch { return null; }
}
function link(url, text) {
  return h('a', { href: url, target: '_blank', rel: 'noopener noreferrer', text });
}
function inline(text, parent, sources) {
  const re = /(\*\*[^*]+\*\*|\*[^*\s][^*]*\*|`[^`]+`|\[[^\]]+\]\([^)\s]+\)|\[\d+\]|https?:\/\/[^\s<)]+)/g;
  let last = 0, m;
  while ((m = re.exec(text))) {
    if (m.index > last) parent.append(text.slice(last, m.index));
    const t = m[0];
    if (t[0] === '`') parent.append(h('code', { text: t.slice(1, -1) }));
    else if (t.startsWith('**')) inline(t.slice(2, -2), parent.appendChild(h('strong')), sources);
    else if (t[0] === '*') inline(t.slice(1, -1), parent.appendChild(h('em')), sources);
    else if (/^\[\d+\]$/.test(t)) {
      const n = Number(t.slice(1, -1));
      const src = sources.find((s) => s.n === n);
      const url = src?.url && safeUrl(src.url);
      parent.append(h('sup', {}, [url ? h('a', { href: url, target: '_blank', rel: 'noopener noreferrer', 'aria-label': 'Source ' + n, text: `[${n}]` }) : `[${n}]`]));
    } else if (t[0] === '[') {
      const mm = /^\[([^\]]+)\]\(([^)\s]+)\)$/.exec(t);
      const href = safeUrl(mm[2]);
      parent.append(href ? link(href, mm[1]) : mm[1]);
    } else {
      const u = safeUrl(t);
      parent.append(u ? link(u, t) : t);
    }
    last = re.lastIndex;
  }
  if (last < text.length) parent.append(text.slice(last));
}
function markdown(text, sources) {
  const out = document.createDocumentFragment();
  String(text || '').split(/```/).forEach((block, i) => {
    if (i % 2) { out.append(h('pre', {}, [h('code', { text: block.replace(/^\w*\n/, '') })])); return; }
    for (const para of block.split(/\n{2,}/)) {
      if (!para.trim()) continue;
      const lines = para.split('\n');
      const bullet = lines.every((l) => /^\s*[-*]\s+/.test(l));
      const numbered = lines.every((l) => /^\s*\d+[.)]\s+/.test(l));
      if (bullet || numbered) {
        const list = h(bullet ? 'ul' : 'ol');
        for (const l of lines) inline(l.replace(/^\s*([-*]|\d+[.)])\s+/, ''), list.appendChild(h('li')), sources);
        out.append(list);
      } else {
        const p = h('p');
        lines.forEach((l, j) => { if (j) p.append(h('br')); inline(l.replace(/^#{1,6}\s+/, ''), p, sources); });
        out.append(p);
      }
    }
  });
  return out;
}

// ---- bubbles, cards and step lines ----------------------------------------------------

function stepLine(status, label, call) {
  const [mark, tone, word] = STEP[status] || ['', '', status];
  return h('p', { class: 'step' + (tone ? ' ' + tone : ''), 'data-status': status, 'data-call': call || null }, [
    mark ? h('span', { class: 'mark', 'aria-hidden': 'true', text: mark + ' ' }) : null,
    h('strong', { text: word }),
    label ? ' · ' + label : null,
  ]);
}

/** `Name: value` lines, one per argument, as on the visitor's card. */
function argLines(lines) {
  if (!lines?.length) return null;
  return h('ul', { class: 'args' }, lines.map((l) => h('li', { 'data-arg': l.name }, [
    h('span', { class: 'arg-name', text: l.name }), ': ', h('span', { class: 'arg-value', text: l.value }),
  ])));
}

/** A confirmation step: the card's title and lines, then where it stands. */
function card(step, level) {
  const el = h('div', { class: 'card', role: 'group', 'aria-label': 'Card: ' + step.label, 'data-call': step.call, 'data-status': step.status });
  el.append(h(level, { class: 'card-title', text: step.label }));
  const lines = argLines(step.arguments);
  if (lines) el.append(lines);
  if (step.status === 'pending') {
    el.append(h('p', { class: 'step pending', 'data-status': 'pending' }, [
      h('strong', { text: 'Waiting for the visitor' }), step.expires_at ? ' · expires ' + fmtTime(step.expires_at) : null,
    ]));
  } else {
    el.append(stepLine(step.status, '', step.call));
  }
  return el;
}

function bubble(m) {
  const who = m.role === 'visitor' ? 'Visitor' : 'Assistant';
  const meta = [who, ' · ', timeEl(m.created_at)];
  if (m.usage) meta.push(` · ${num(m.usage.input_tokens)} in, ${num(m.usage.output_tokens)} out tokens`);
  const el = h('div', { class: 'msg ' + (m.role === 'visitor' ? 'visitor' : 'assistant'), 'data-message': m.id, 'data-status': m.status || null }, [
    h('p', { class: 'who' }, meta),
  ]);
  if (m.role === 'visitor') { el.append(h('div', { class: 'body plain', text: m.text })); return el; }
  const sources = m.citations || [];
  const body = h('div', { class: 'body' });
  body.append(markdown(m.text, sources));
  el.append(body);
  if (sources.length) {
    el.append(h('ol', { class: 'sources', 'aria-label': 'Sources' }, sources.map((s) => {
      const url = s.url && safeUrl(s.url);
      return h('li', { value: String(s.n) }, [url ? link(url, s.title || url) : s.title]);
    })));
  }
  for (const s of m.steps || []) el.append(s.kind === 'confirmation' ? card(s, 'h3') : stepLine(s.status, s.label, s.call));
  if (m.status === 'failed' && !m.text) el.append(h('p', { class: 'error-text', text: 'This answer could not be completed.' }));
  return el;
}

// ---- paged lists --------------------------------------------------------------------

/**
 * A table filled page by page from `path` (newest first, `next_cursor`). `refresh`
 * re-reads the first page and keeps any further pages already shown, so a live
 * update never throws away what the operator paged to.
 */
function pagedList(ctx, { path, params, tbody, row, cols, empty, more, key, onError }) {
  let items = [], cursor = null, pages = 0, seq = 0;
  function render() {
    tbody.replaceChildren(...(items.length ? items.map(row) : [emptyRow(cols, empty)]));
    more.hidden = !cursor;
  }
  async function load(reset) {
    const mine = ++seq;
    more.disabled = true;
    try {
      const page = await api('GET', path + qs({ ...params(), cursor: reset ? '' : cursor }));
      if (mine !== seq || !ctx.alive) return;
      items = reset ? page.items : items.concat(page.items);
      cursor = page.next_cursor || null;
      pages = reset ? 1 : pages + 1;
      render();
      onError(null);
    } catch (e) {
      if (mine === seq && ctx.alive) onError(e);
    } finally {
      more.disabled = false;
    }
  }
  /** Re-reads the first page; returns how many rows are new. */
  async function refresh() {
    const mine = ++seq;
    try {
      const page = await api('GET', path + qs(params()));
      if (mine !== seq || !ctx.alive) return 0;
      const known = new Set(items.map(key));
      const fresh = page.items.filter((i) => !known.has(key(i))).length;
      if (pages <= 1) { items = page.items; cursor = page.next_cursor || null; pages = 1; }
      else { const first = new Set(page.items.map(key)); items = page.items.concat(items.filter((i) => !first.has(key(i)))); }
      render();
      return fresh;
    } catch (e) {
      if (mine === seq && ctx.alive) onError(e);
      return 0;
    }
  }
  more.addEventListener('click', async () => {
    const count = items.length;
    await load(false);
    // When the button goes away, focus stays in the table, on the first new row.
    if (more.hidden && ctx.alive) (tbody.rows[count]?.querySelector('a') || tbody.closest('.table-wrap')).focus();
  });
  return { load, refresh };
}

// ---- Conversations ----------------------------------------------------------------------

const convFilters = { site: '', status: '', pending: false, q: '' };

function pageConversations(ctx) {
  const site = select('conv-site', siteOptions(true), convFilters.site);
  const status = select('conv-status', [['', 'Any status']].concat(['answered', 'awaiting_confirmation', 'failed', 'streaming'].map((s) => [s, STATUS[s]])), convFilters.status);
  const pending = h('input', { id: 'conv-pending', type: 'checkbox', checked: convFilters.pending });
  const q = h('input', { id: 'conv-q', type: 'search', value: convFilters.q, autocomplete: 'off' });
  const form = h('form', { class: 'filters', role: 'search', 'aria-label': 'Filter conversations' }, [
    field('Site', site), field('Status', status), checkField('Pending card only', pending), field('Search', q, 'grow'),
    h('button', { type: 'submit', text: 'Search' }),
  ]);
  const tbody = h('tbody', { id: 'conversation-rows' });
  const more = h('button', { type: 'button', id: 'conversations-more', class: 'secondary', text: 'Load more', hidden: true });
  const errors = h('div', { class: 'errors' });
  view.append(pageTitle('Conversations'), form, errors,
    table('conversations', 'Conversations, newest first', ['Conversation', 'Site', 'Visitor', 'Started', 'Status', 'Pending card'], tbody), more);

  const list = pagedList(ctx, {
    path: '/conversations', tbody, more, cols: 6, key: (c) => c.id,
    empty: 'No conversations match these filters.',
    params: () => ({ site: convFilters.site, status: convFilters.status, pending: convFilters.pending ? 'true' : '', q: convFilters.q }),
    row: conversationRow,
    onError: (e) => errors.replaceChildren(...(e ? [errorText(e)] : [])),
  });
  function apply() {
    Object.assign(convFilters, { site: site.value, status: status.value, pending: pending.checked, q: q.value.trim() });
    list.load(true);
  }
  form.addEventListener('submit', (e) => { e.preventDefault(); apply(); });
  for (const c of [site, status, pending]) c.addEventListener('change', apply);

  const refresh = debounced(ctx, async () => {
    const fresh = await list.refresh();
    if (ctx.alive) announce(fresh ? `${fresh} new conversation${fresh === 1 ? '' : 's'}.` : 'Conversations updated.');
  }, 300);
  onLive(ctx, (d) => { if (!d || !convFilters.site || d.site === convFilters.site) refresh(); });
  list.load(true);
}

function conversationRow(c) {
  const last = c.last_message;
  const text = (last?.text || '').trim();
  const title = text ? (text.length > 140 ? text.slice(0, 139) + '…' : text)
    : c.pending_card ? 'Card: ' + c.pending_card.label : 'Conversation ' + c.id;
  return h('tr', { 'data-conversation': c.id, 'data-status': c.status || null }, [
    h('td', { class: 'wide' }, [
      h('a', { href: '#/conversations/' + enc(c.id), text: title }),
      h('span', { class: 'sub', text: (last ? (last.role === 'visitor' ? 'Visitor' : 'Assistant') + ' · ' : '') + c.id }),
    ]),
    h('td', { text: siteName(c.site) }),
    h('td', {}, [h('code', { text: c.visitor }), c.user_id ? h('span', { class: 'sub', text: 'User ' + c.user_id }) : null]),
    h('td', {}, [timeEl(c.started_at)]),
    h('td', {}, [statusBadge(c.status)]),
    h('td', {}, c.pending_card ? [badge(c.pending_card.label, 'warn'), c.pending_card.expires_at ? h('span', { class: 'sub' }, ['Expires ', timeEl(c.pending_card.expires_at)]) : null] : ['—']),
  ]);
}

// ---- One conversation ----------------------------------------------------------------------

function pageConversation(ctx, id) {
  const meta = h('dl', { class: 'meta', id: 'conversation-meta' });
  const messages = h('div', { class: 'log', id: 'messages' });
  const calls = h('div', { id: 'calls', class: 'calls' });
  const errors = h('div', { class: 'errors' });
  view.append(
    h('p', { class: 'back' }, [h('a', { href: '#/conversations', text: '← All conversations' })]),
    pageTitle('Conversation'), errors, meta,
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
      if (json === shown) return;
      shown = json;
      renderConversation(c, meta, messages, calls);
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
      row('Policy', POLICY[c.policy] || c.policy),
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

// ---- Audit ----------------------------------------------------------------------------

function auditCells(r, compact) {
  const args = r.arguments === null || r.arguments === undefined ? '—' : h('code', { class: 'args-json', text: JSON.stringify(r.arguments) });
  const cells = [
    h('td', {}, [timeEl(r.at)]),
    h('td', {}, [badge(EVENT_LABEL[r.event] || r.event, { failed: 'bad', refused: 'bad', confirmed: 'ok', executed: 'ok', tool_changed: 'warn' }[r.event])]),
    h('td', { text: r.reason || '—' }),
  ];
  if (!compact) {
    cells.push(
      h('td', {}, [r.tool ? h('code', { text: r.tool }) : '—']),
      h('td', { text: r.policy ? POLICY[r.policy] || r.policy : '—' }),
      h('td', {}, [r.call ? h('code', { text: r.call }) : '—']),
      h('td', {}, [r.conversation ? h('a', { href: '#/conversations/' + enc(r.conversation), text: r.conversation }) : '—']),
      h('td', { text: r.operator || '—' }),
    );
  } else {
    cells.push(h('td', { text: r.policy ? POLICY[r.policy] || r.policy : '—' }), h('td', { text: r.operator || '—' }));
  }
  cells.push(h('td', { class: 'wide' }, [args]));
  return h('tr', { 'data-event': r.event }, cells);
}
const AUDIT_COLS = ['At', 'Event', 'Reason', 'Tool', 'Policy', 'Call', 'Conversation', 'Operator', 'Arguments'];
const AUDIT_COLS_COMPACT = ['At', 'Event', 'Reason', 'Policy', 'Operator', 'Arguments'];

function auditTable(id, caption, rows, compact) {
  const cols = compact ? AUDIT_COLS_COMPACT : AUDIT_COLS;
  const tbody = h('tbody', {}, rows.length ? rows.map((r) => auditCells(r, compact)) : [emptyRow(cols.length, 'No audit rows.')]);
  return table(id, caption, cols, tbody);
}

const auditFilters = { site: '', event: '', tool: '', call: '', after: '', before: '' };

function pageAudit(ctx) {
  const f = auditFilters;
  const site = select('audit-site', siteOptions(true), f.site);
  const event = select('audit-event', [['', 'Any event']].concat(EVENTS.map((e) => [e, EVENT_LABEL[e]])), f.event);
  const tool = h('input', { id: 'audit-tool', type: 'text', value: f.tool, autocomplete: 'off' });
  const call = h('input', { id: 'audit-call', type: 'text', value: f.call, autocomplete: 'off' });
  const after = h('input', { id: 'audit-after', type: 'datetime-local', value: f.after, step: '1' });
  const before = h('input', { id: 'audit-before', type: 'datetime-local', value: f.before, step: '1' });
  const form = h('form', { class: 'filters', role: 'search', 'aria-label': 'Filter the audit' }, [
    field('Site', site), field('Event', event), field('Tool', tool), field('Call', call),
    field('At or after (your time)', after), field('Before (your time)', before),
    h('button', { type: 'submit', text: 'Apply filters' }),
  ]);
  const jsonl = h('a', { id: 'export-jsonl', class: 'button secondary', download: 'deskbell-audit.jsonl', text: 'Export JSON lines' });
  const csv = h('a', { id: 'export-csv', class: 'button secondary', download: 'deskbell-audit.csv', text: 'Export CSV' });
  const exportNote = h('p', { class: 'muted small', id: 'export-note' });
  function exportLinks() {
    jsonl.href = '/v1/operator/audit/export' + qs({ format: 'jsonl', site: f.site });
    csv.href = '/v1/operator/audit/export' + qs({ format: 'csv', site: f.site });
    exportNote.textContent = `Exports hold every row${f.site ? ' of ' + siteName(f.site) : ''}, oldest first; the other filters do not apply to them.`;
  }
  const tbody = h('tbody', { id: 'audit-rows' });
  const more = h('button', { type: 'button', id: 'audit-more', class: 'secondary', text: 'Load more', hidden: true });
  const errors = h('div', { class: 'errors' });
  view.append(pageTitle('Audit'), form, h('div', { class: 'exports' }, [jsonl, csv, exportNote]), errors,
    table('audit-table', 'Audit rows, newest first', AUDIT_COLS, tbody), more);

  const list = pagedList(ctx, {
    path: '/audit', tbody, more, cols: AUDIT_COLS.length, key: (r) => JSON.stringify(r),
    empty: 'No audit rows match these filters.',
    params: () => ({ site: f.site, event: f.event, tool: f.tool, call: f.call, after: toRfc3339(f.after), before: toRfc3339(f.before) }),
    row: (r) => auditCells(r, false),
    onError: (e) => errors.replaceChildren(...(e ? [errorText(e)] : [])),
  });
  function apply() {
    Object.assign(f, { site: site.value, event: event.value, tool: tool.value.trim(), call: call.value.trim(), after: after.value, before: before.value });
    exportLinks();
    list.load(true);
  }
  form.addEventListener('submit', (e) => { e.preventDefault(); apply(); });
  for (const c of [site, event, after, before]) c.addEventListener('change', apply);
  exportLinks();
  list.load(true);
}

// ---- Tools -----------------------------------------------------------------------------

let toolsSite = '';

/** Example arguments from a JSON schema: integers 42, strings "example", booleans true, enums their first value. */
function example(schema, depth = 0) {
  if (!schema || typeof schema !== 'object' || depth > 6) return null;
  if (Array.isArray(schema.enum) && schema.enum.length) return schema.enum[0];
  if ('const' in schema) return schema.const;
  const alt = schema.oneOf || schema.anyOf;
  if (Array.isArray(alt) && alt.length) return example(alt[0], depth + 1);
  let type = Array.isArray(schema.type) ? schema.type.find((t) => t !== 'null') : schema.type;
  if (!type && schema.properties) type = 'object';
  switch (type) {
    case 'integer': case 'number': return 42;
    case 'string': return 'example';
    case 'boolean': return true;
    case 'array': { const item = example(schema.items, depth + 1); return item === null ? [] : [item]; }
    case 'object': {
      const out = {};
      for (const [k, v] of Object.entries(schema.properties || {})) out[k] = example(v, depth + 1);
      return out;
    }
    default: return null;
  }
}

function pageTools(ctx) {
  const site = select('tools-site', siteOptions(true), toolsSite);
  const list = h('div', { id: 'tool-list' }, [h('p', { class: 'muted loading', text: 'Loading tools…' })]);
  view.append(pageTitle('Tools'),
    h('p', { class: 'muted' }, [isAdmin()
      ? 'Changes apply from the next model round and stay until reset to the file. Changing a tool makes its waiting cards stale.'
      : 'You can read tools and preview cards; only admins can change them.']),
    h('form', { class: 'filters', 'aria-label': 'Choose a site' }, [field('Site', site)]), list);
  async function load() {
    const sites = toolsSite ? [toolsSite] : state.sites.map((s) => s.id);
    try {
      const groups = sites.length
        ? await Promise.all(sites.map(async (s) => [s, (await api('GET', '/tools' + qs({ site: s }))).items]))
        : [['', (await api('GET', '/tools')).items]];
      if (!ctx.alive) return;
      list.replaceChildren(...groups.map(([s, tools]) => {
        const hid = 'site-tools-' + idPart(s || 'all');
        return h('section', { class: 'site-block', 'data-site': s || null, 'aria-labelledby': hid }, [
          h('h2', { id: hid, text: s ? siteName(s) : 'All sites' }),
          ...(tools.length ? tools.map((t) => toolArticle(t)) : [h('p', { class: 'muted', text: 'This site has no tools.' })]),
        ]);
      }));
    } catch (e) { if (ctx.alive) list.replaceChildren(errorText(e)); }
  }
  site.addEventListener('change', () => { toolsSite = site.value; load(); });
  load();
}

function toolArticle(t, message) {
  const key = idPart(t.site) + '-' + idPart(t.name);
  const path = `/tools/${enc(t.site)}/${enc(t.name)}`;
  const row = (name, value) => h('div', {}, [h('dt', { text: name }), h('dd', {}, [value])]);
  const el = h('article', { class: 'tool', id: 'tool-' + key, 'data-site': t.site, 'data-tool': t.name, 'data-policy': t.policy, 'aria-labelledby': `tool-${key}-name` });
  el.append(h('h3', { id: `tool-${key}-name` }, [h('code', { text: t.name })]));
  el.append(h('p', { class: 'changed muted small' }, t.changed
    ? ['Changed in console by ', t.changed_by || 'an operator', ' at ', timeEl(t.changed_at), '.']
    : ['As in the config file.']));
  const facts = [row('Source', t.source), h('div', { class: 'span-all' }, [h('dt', { text: 'Executor URL' }), h('dd', {}, [h('code', { text: t.url })])]), row('Timeout', `${t.timeout_s} s`)];
  if (!isAdmin()) {
    facts.unshift(row('Shown to visitors', t.label), row('Description', t.description || '—'), row('Policy', POLICY[t.policy] || t.policy));
  }
  el.append(h('div', { class: 'tool-body' }, [
    h('div', {}, [h('dl', { class: 'meta' }, facts), isAdmin() ? toolForm(t, key, path, el, message) : null]),
    h('div', {}, [
      h('details', { class: 'schema' }, [h('summary', { text: 'Input schema' }), h('pre', { class: 'json', text: JSON.stringify(t.input_schema, null, 2) })]),
      previewForm(t, key, path),
    ]),
  ]));
  return el;
}

function toolForm(t, key, path, article, message) {
  const label = h('input', { id: `tool-${key}-label`, type: 'text', value: t.label, autocomplete: 'off' });
  const description = h('textarea', { id: `tool-${key}-description`, rows: '3', text: t.description });
  const radios = Object.entries(POLICY).map(([value, text]) => {
    const id = `tool-${key}-policy-${value}`;
    return h('div', { class: 'radio' }, [
      h('input', { type: 'radio', id, name: `policy-${key}`, value, checked: t.policy === value }),
      h('label', { for: id, text }),
    ]);
  });
  const status = h('p', { class: 'tool-status', role: 'status', text: message || '' });
  const save = h('button', { type: 'submit', class: 'save', text: 'Save' });
  const reset = h('button', { type: 'button', class: 'secondary reset', text: 'Reset to file', disabled: !t.changed });
  const fromFile = t.changed && t.file
    ? h('p', { class: 'muted small' }, [`The file says: “${t.file.label}”, ${POLICY[t.file.policy] || t.file.policy}.`])
    : null;
  const form = h('form', { class: 'tool-form', 'aria-label': 'Change ' + t.name }, [
    field('Shown to visitors', label), field('Description', description),
    h('fieldset', { class: 'policy' }, [h('legend', { text: 'Policy' }), ...radios]),
    fromFile, h('div', { class: 'actions' }, [save, reset]), status,
  ]);
  async function send(change, done) {
    save.disabled = reset.disabled = true;
    status.className = 'tool-status'; status.textContent = 'Saving…';
    try {
      const updated = await api('PATCH', path, change);
      const fresh = toolArticle(updated, done);
      article.replaceWith(fresh);
      fresh.querySelector('button.save')?.focus();
      announce(`${t.name}: ${done}`);
    } catch (e) {
      status.className = 'tool-status error-text'; status.textContent = e.message;
      save.disabled = false; reset.disabled = !t.changed;
    }
  }
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const change = {};
    if (label.value !== t.label) change.label = label.value;
    if (description.value !== t.description) change.description = description.value;
    const policy = form.querySelector(`input[name="policy-${key}"]:checked`)?.value;
    if (policy && policy !== t.policy) change.policy = policy;
    if (!Object.keys(change).length) { status.className = 'tool-status'; status.textContent = 'Nothing to save: nothing was changed.'; return; }
    send(change, 'Saved. It applies from the next model round.');
  });
  reset.addEventListener('click', () => send({ reset: true }, 'Reset to the file’s values.'));
  return form;
}

function previewForm(t, key, path) {
  const prefill = JSON.stringify(example(t.input_schema) ?? {}, null, 2);
  const rows = Math.min(12, Math.max(3, prefill.split('\n').length));
  const args = h('textarea', { id: `tool-${key}-args`, rows: String(rows), class: 'mono', spellcheck: 'false', text: prefill });
  const out = h('div', { class: 'preview-out', 'aria-live': 'polite' });
  const button = h('button', { type: 'submit', class: 'secondary', text: 'Preview card' });
  const form = h('form', { class: 'preview-form', 'aria-label': 'Preview a card of ' + t.name }, [
    h('h4', { text: 'Card preview' }), field('Arguments (JSON)', args), button, out,
  ]);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    let value;
    try { value = JSON.parse(args.value); } catch (x) {
      out.replaceChildren(h('p', { class: 'error-text', text: 'The arguments are not valid JSON: ' + x.message }));
      return;
    }
    button.disabled = true;
    try {
      const c = await api('POST', path + '/preview', { arguments: value });
      out.replaceChildren(h('div', { class: 'card preview-card', role: 'group', 'aria-label': 'Card preview: ' + c.title }, [
        h('h5', { class: 'card-title', text: c.title }), argLines(c.lines),
        h('p', { class: 'muted small', text: 'The visitor would see Cancel and Confirm buttons here.' }),
      ]));
    } catch (x) {
      out.replaceChildren(h('p', { class: 'error-text', text: x.message }));
    } finally { button.disabled = false; }
  });
  return form;
}

// ---- Knowledge -----------------------------------------------------------------------------

function pageKnowledge(ctx) {
  const list = h('div', { id: 'knowledge-list' }, [h('p', { class: 'muted loading', text: 'Loading…' })]);
  view.append(pageTitle('Knowledge'), list);
  api('GET', '/knowledge').then((k) => {
    if (!ctx.alive) return;
    list.replaceChildren(...(k.items.length ? k.items.map((item) => knowledgeSite(ctx, item)) : [h('p', { class: 'muted', text: 'No site has knowledge sources.' })]));
  }, (e) => { if (ctx.alive) list.replaceChildren(errorText(e)); });
}

function reportView(r) {
  if (!r) return [h('p', { class: 'muted', text: 'Never ingested.' })];
  const row = (name, value) => h('div', {}, [h('dt', { text: name }), h('dd', { text: num(value) })]);
  const out = [
    h('p', {}, ['Finished ', timeEl(r.at), '.']),
    h('dl', { class: 'meta counts' }, [row('Added', r.added), row('Updated', r.updated), row('Unchanged', r.unchanged), row('Removed', r.removed), row('Chunks', r.chunks)]),
  ];
  if (r.skipped?.length) {
    out.push(h('h4', { text: 'Skipped' }), h('ul', { class: 'skipped' }, r.skipped.map((s) => h('li', {}, [h('code', { text: s.source }), ' — ' + s.reason]))));
  }
  return out;
}

function knowledgeSite(ctx, k) {
  const key = idPart(k.site);
  const report = h('div', { class: 'report', id: 'report-' + key }, reportView(k.last_report));
  const section = h('section', { class: 'site-block', 'data-site': k.site, 'aria-labelledby': 'knowledge-' + key }, [
    h('h2', { id: 'knowledge-' + key, text: siteName(k.site) }),
    h('dl', { class: 'meta' }, [
      h('div', {}, [h('dt', { text: 'Indexed' }), h('dd', { text: k.indexed ? 'Yes' : 'No' })]),
      h('div', {}, [h('dt', { text: 'Sources' }), h('dd', {}, k.sources.length
        ? [h('ul', { class: 'plain' }, k.sources.map((s) => h('li', {}, [h('code', { text: s })])))]
        : ['None configured'])]),
    ]),
    h('h3', { text: 'Last ingest' }), report,
  ]);
  if (isAdmin()) {
    const status = h('p', { class: 'ingest-status', role: 'status' });
    const button = h('button', { type: 'button', class: 'ingest', text: 'Re-ingest' });
    button.addEventListener('click', async () => {
      button.disabled = true; status.className = 'ingest-status'; status.textContent = 'Ingesting… this can take a while.';
      try {
        const r = await api('POST', `/knowledge/${enc(k.site)}/ingest`);
        if (!ctx.alive) return;
        report.replaceChildren(...reportView(r));
        status.textContent = `Ingest finished: ${r.added} added, ${r.updated} updated, ${r.removed} removed, ${r.skipped?.length || 0} skipped.`;
      } catch (e) {
        status.className = 'ingest-status error-text'; status.textContent = e.message;
      } finally { button.disabled = false; }
    });
    section.append(h('div', { class: 'actions' }, [button]), status);
  }
  const q = h('input', { id: 'search-' + key, type: 'search', autocomplete: 'off' });
  const results = h('div', { class: 'passages', 'aria-live': 'polite' });
  const form = h('form', { class: 'filters', role: 'search', 'aria-label': 'Search the knowledge of ' + siteName(k.site) }, [
    field('Question', q, 'grow'), h('button', { type: 'submit', text: 'Search' }),
  ]);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (!q.value.trim()) { results.replaceChildren(h('p', { class: 'muted', text: 'Type a question first.' })); return; }
    try {
      const r = await api('GET', `/knowledge/${enc(k.site)}/search` + qs({ q: q.value.trim() }));
      if (!ctx.alive) return;
      results.replaceChildren(r.passages.length ? passageList(r.passages) : h('p', { class: 'muted', text: 'No passages: a turn would give the model no sources for this question.' }));
    } catch (x) { results.replaceChildren(errorText(x)); }
  });
  section.append(h('h3', { text: 'What the model would get' }), form, results);
  return section;
}

function passageList(passages) {
  return h('ol', { class: 'passage-list' }, passages.map((p) => {
    const url = p.url && safeUrl(p.url);
    return h('li', { value: String(p.n), 'data-passage': String(p.n) }, [
      h('p', { class: 'passage-title' }, [h('strong', { text: `[${p.n}] ${p.title}` }), url ? ' · ' : null, url ? link(url, p.url) : null]),
      h('p', { class: 'plain', text: p.text }),
      h('p', { class: 'muted small', text: `Score ${Number(p.score).toFixed(3)}` }),
    ]);
  }));
}

// ---- Usage ---------------------------------------------------------------------------------

const usageFilters = { site: '', days: '14' };
const TOKEN_SERIES = [
  { key: 'input_tokens', label: 'Input tokens', color: '#1f4fd1' },
  { key: 'output_tokens', label: 'Output tokens', color: '#b3261e', dash: [6, 3] },
];
const ACTIVITY_SERIES = [
  { key: 'turns', label: 'Turns', color: '#1f4fd1' },
  { key: 'confirmed', label: 'Confirmed', color: '#146c33', dash: [6, 3] },
  { key: 'cancelled', label: 'Cancelled', color: '#6b4c00', dash: [2, 3] },
  { key: 'expired', label: 'Expired', color: '#5b3d99', dash: [10, 4] },
  { key: 'auto_calls', label: 'Auto calls', color: '#00677f', dash: [4, 2, 1, 2] },
  { key: 'failures', label: 'Failures', color: '#b3261e', dash: [1, 2] },
];

function pageUsage(ctx) {
  const site = select('usage-site', siteOptions(true), usageFilters.site);
  const days = select('usage-days', [['7', 'Last 7 days'], ['14', 'Last 14 days'], ['30', 'Last 30 days'], ['90', 'Last 90 days']], usageFilters.days);
  const list = h('div', { id: 'usage-list' }, [h('p', { class: 'muted loading', text: 'Loading…' })]);
  view.append(pageTitle('Usage'), h('form', { class: 'filters', 'aria-label': 'Choose what to show' }, [field('Site', site), field('Period', days)]), list);
  let charts = [];
  const dropCharts = () => { for (const c of charts) c(); charts = []; };
  ctx.cleanups.push(dropCharts);
  async function load() {
    try {
      const u = await api('GET', '/usage' + qs({ site: usageFilters.site, days: usageFilters.days }));
      if (!ctx.alive) return;
      dropCharts();
      list.replaceChildren(...(u.sites.length ? [] : [h('p', { class: 'muted', text: 'No usage to show.' })]));
      for (const s of u.sites) usageSite(s, list, charts);
    } catch (e) { if (ctx.alive) list.replaceChildren(errorText(e)); }
  }
  for (const c of [site, days]) c.addEventListener('change', () => { usageFilters.site = site.value; usageFilters.days = days.value; load(); });
  load();
}

function usageSite(s, list, charts) {
  const key = idPart(s.site);
  const name = siteName(s.site);
  const budget = s.daily_token_budget;
  const tokenSeries = TOKEN_SERIES.slice();
  if (budget) tokenSeries.push({ label: 'Daily budget', color: '#4d4d57', dash: [3, 3], values: s.days.map(() => budget) });
  const tokens = chartBlock(key, 'tokens', 'Tokens per day', tokenSeries);
  const activity = chartBlock(key, 'activity', 'Turns and calls per day', ACTIVITY_SERIES);
  const rows = s.days.map((d) => h('tr', {}, [
    h('th', { scope: 'row', text: d.day }),
    ...['turns', 'input_tokens', 'output_tokens', 'spent', 'confirmed', 'cancelled', 'expired', 'auto_calls', 'failures'].map((k) => h('td', { class: 'num', text: num(d[k]) })),
  ]));
  list.append(h('section', { class: 'site-block usage', 'data-site': s.site, 'aria-labelledby': 'usage-' + key }, [
    h('h2', { id: 'usage-' + key, text: name }),
    h('p', {}, [budget ? `Daily token budget: ${num(budget)} tokens.` : 'No daily token budget.']),
    h('div', { class: 'charts' }, [tokens.block, activity.block]),
    table('usage-table-' + key, `${name}: usage per day (UTC)`,
      ['Day', 'Turns', 'Input tokens', 'Output tokens', 'Spent', 'Confirmed', 'Cancelled', 'Expired', 'Auto calls', 'Failures'],
      h('tbody', {}, rows)),
  ]));
  // uPlot measures its box, so the charts are drawn once they are in the page.
  const xs = s.days.map((d) => Date.parse(d.day + 'T00:00:00Z') / 1000);
  const values = (series) => series.map((x) => x.values || s.days.map((d) => d[x.key] ?? 0));
  charts.push(drawChart(tokens.box, xs, tokenSeries, values(tokenSeries)));
  charts.push(drawChart(activity.box, xs, ACTIVITY_SERIES, values(ACTIVITY_SERIES)));
}

function chartBlock(key, kind, title, series) {
  const hid = `chart-${key}-${kind}`;
  const box = h('div', { class: 'chart', 'data-chart': kind, role: 'img', 'aria-label': `${title}: chart; the table below gives the same numbers.` });
  const legend = h('ul', { class: 'legend', 'aria-hidden': 'true' }, series.map((x) => {
    const swatch = h('span', { class: 'swatch' });
    swatch.style.borderTop = `3px ${x.dash ? 'dashed' : 'solid'} ${x.color}`;
    return h('li', {}, [swatch, x.label]);
  }));
  return { box, block: h('figure', { class: 'chart-block', 'aria-labelledby': hid }, [h('figcaption', { id: hid, text: title }), legend, box]) };
}

/** Draws one uPlot chart into `box`; returns the function that removes it. */
function drawChart(box, xs, series, data) {
  if (!window.uPlot) {
    box.append(h('p', { class: 'muted', text: 'The chart could not be drawn; the table below has the numbers.' }));
    return () => {};
  }
  const U = window.uPlot;
  const width = () => Math.max(240, Math.floor(box.clientWidth || 600));
  const axis = { stroke: '#1b1b1f', grid: { stroke: '#e3e4ea', width: 1 }, ticks: { stroke: '#d9d9e0', width: 1 } };
  const plot = new U({
    width: width(), height: 220,
    legend: { show: false },
    cursor: { drag: { x: false, y: false } },
    scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
    tzDate: (ts) => U.tzDate(new Date(ts * 1000), 'Etc/UTC'),
    axes: [axis, { ...axis, size: 64 }],
    series: [{}, ...series.map((x) => ({ label: x.label, stroke: x.color, width: 2, dash: x.dash, points: { show: true, size: 5 } }))],
  }, [xs, ...data], box);
  // Follow the box's width (window resize, phone rotation) without a page reload.
  const ro = new ResizeObserver(() => { const w = width(); if (w !== plot.width) plot.setSize({ width: w, height: 220 }); });
  ro.observe(box);
  return () => { ro.disconnect(); plot.destroy(); };
}

// ---- start ----------------------------------------------------------------------------

function start() {
  document.getElementById('signin-form').addEventListener('submit', onSignIn);
  document.getElementById('signout').addEventListener('click', signOut);
  // The skip link moves focus without touching the hash, which holds the page.
  document.getElementById('skip').addEventListener('click', (e) => {
    e.preventDefault();
    const main = document.getElementById('main');
    (main.querySelector('section:not([hidden]) h1, #view:not([hidden]) h1') || main).focus();
  });
  window.addEventListener('hashchange', () => route(true));
  api('GET', '/session').then(
    (s) => signedIn(s, false),
    (e) => showSignIn(e.code === 'operator_unauthenticated' ? '' : e.message),
  );
}

start();
