// The Audit page, and the audit table that a conversation's calls reuse in a
// compact form. Both draw rows here so an event reads the same wherever it is
// shown. Exports ignore every filter but the site, and the page says so.

import { h, view, pageTitle, field, select, table, emptyRow, errorText, badge, timeEl, enc, qs, toRfc3339 } from './dom.js';
import { POLICY_NAME, EVENTS, EVENT_LABEL } from './labels.js';
import { siteName, siteOptions } from './state.js';
import { pagedList } from './paged.js';

const AUDIT_COLS = ['At', 'Event', 'Reason', 'Tool', 'Policy', 'Call', 'Conversation', 'Operator', 'Arguments'];
const AUDIT_COLS_COMPACT = ['At', 'Event', 'Reason', 'Policy', 'Operator', 'Arguments'];
const EVENT_TONE = { failed: 'bad', refused: 'bad', confirmed: 'ok', executed: 'ok', tool_changed: 'warn' };

function auditCells(r, compact) {
  const args = r.arguments === null || r.arguments === undefined ? '—' : h('code', { class: 'args-json', text: JSON.stringify(r.arguments) });
  const cells = [
    h('td', {}, [timeEl(r.at)]),
    h('td', {}, [badge(EVENT_LABEL[r.event] || r.event, EVENT_TONE[r.event])]),
    h('td', { text: r.reason || '—' }),
  ];
  if (!compact) {
    cells.push(
      h('td', {}, [r.tool ? h('code', { text: r.tool }) : '—']),
      h('td', { text: r.policy ? POLICY_NAME[r.policy] || r.policy : '—' }),
      h('td', {}, [r.call ? h('code', { text: r.call }) : '—']),
      h('td', {}, [r.conversation ? h('a', { href: '#/conversations/' + enc(r.conversation), text: r.conversation }) : '—']),
      h('td', { text: r.operator || '—' }),
    );
  } else {
    cells.push(h('td', { text: r.policy ? POLICY_NAME[r.policy] || r.policy : '—' }), h('td', { text: r.operator || '—' }));
  }
  cells.push(h('td', { class: 'wide' }, [args]));
  return h('tr', { 'data-event': r.event }, cells);
}

/** A fixed table of audit rows; `compact` leaves out what a call's own page already shows. */
export function auditTable(id, caption, rows, compact) {
  const cols = compact ? AUDIT_COLS_COMPACT : AUDIT_COLS;
  const tbody = h('tbody', {}, rows.length ? rows.map((r) => auditCells(r, compact)) : [emptyRow(cols.length, 'No audit rows.')]);
  return table(id, caption, cols, tbody);
}

const auditFilters = { site: '', event: '', tool: '', call: '', after: '', before: '' };

export function pageAudit(ctx) {
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
  // Visitors' ratings of answers go beside the audit (issue 41).
  const feedback = h('a', { id: 'export-feedback', class: 'button secondary', download: 'deskbell-feedback.csv', text: 'Export feedback (CSV)' });
  const exportNote = h('p', { class: 'muted small', id: 'export-note' });
  function exportLinks() {
    feedback.href = '/v1/operator/feedback/export' + qs({ format: 'csv', site: f.site });
    jsonl.href = '/v1/operator/audit/export' + qs({ format: 'jsonl', site: f.site });
    csv.href = '/v1/operator/audit/export' + qs({ format: 'csv', site: f.site });
    exportNote.textContent = `Exports hold every row${f.site ? ' of ' + siteName(f.site) : ''}, oldest first; the other filters do not apply to them.`;
  }
  const tbody = h('tbody', { id: 'audit-rows' });
  const more = h('button', { type: 'button', id: 'audit-more', class: 'secondary', text: 'Load more', hidden: true });
  const errors = h('div', { class: 'errors' });
  view.append(pageTitle('Audit'), form, h('div', { class: 'exports' }, [jsonl, csv, feedback, exportNote]), errors,
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
