// The Conversations page: every conversation, newest first, filtered and kept
// current by live changes. The filters outlive the page so that going into a
// conversation and back returns to the same list.

import { h, view, pageTitle, field, checkField, select, table, errorText, badge, statusBadge, timeEl, announce, enc } from './dom.js';
import { STATUS } from './labels.js';
import { siteName, siteOptions } from './state.js';
import { pagedList } from './paged.js';
import { onLive, debounced } from './live.js';

const convFilters = { site: '', status: '', pending: false, q: '' };

export function pageConversations(ctx) {
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
