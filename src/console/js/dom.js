// Building the page. Everything the API returns is untrusted text: it reaches
// the page only through textContent and attributes, never as HTML, and these
// helpers are how every page keeps to that. Shared formatting lives here too so
// numbers and times read the same on every page.

import { STATUS } from './labels.js';

/** Where pages draw themselves; index.html holds it, and modules run after parsing. */
export const view = document.getElementById('view');

/** Builds an element; `text` sets textContent, functions become listeners. */
export function h(tag, attrs, kids) {
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
export const idPart = (s) => String(s).replace(/[^A-Za-z0-9_-]/g, '_');
export const enc = encodeURIComponent;
export const num = (n) => (typeof n === 'number' ? n.toLocaleString('en') : '—');

export function fmtTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  return isNaN(d) ? String(iso) : d.toLocaleString('en-GB', { dateStyle: 'medium', timeStyle: 'medium' });
}
export const timeEl = (iso) => (iso ? h('time', { datetime: iso, text: fmtTime(iso) }) : '—');

/** A query string from `params`, leaving out empty values; '' when nothing is left. */
export function qs(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== '' && v !== null && v !== undefined && v !== false) q.set(k, String(v));
  const s = q.toString();
  return s ? '?' + s : '';
}

/** A datetime-local value (local time) as RFC 3339 UTC, or '' when empty or invalid. */
export function toRfc3339(value) {
  if (!value) return '';
  const d = new Date(value);
  return isNaN(d) ? '' : d.toISOString();
}

export function announce(text) {
  // Clearing first makes a repeated message be announced again.
  const el = document.getElementById('announce');
  el.textContent = '';
  setTimeout(() => { el.textContent = text; }, 60);
}

export function pageTitle(text) {
  document.title = `${text} · Deskbell console`;
  return h('h1', { tabindex: '-1', text });
}

export function field(label, control, cls) {
  return h('div', { class: 'field' + (cls ? ' ' + cls : '') }, [h('label', { for: control.id, text: label }), control]);
}
export function checkField(label, control) {
  return h('div', { class: 'field check' }, [control, h('label', { for: control.id, text: label })]);
}
export function select(id, options, value) {
  return h('select', { id, name: id }, options.map(([v, t]) => h('option', { value: v, text: t, selected: v === value })));
}

/** A table in its own scrolling box, so wide tables never widen the page. */
export function table(id, caption, headers, tbody) {
  const t = h('table', { id }, [
    h('caption', { text: caption }),
    h('thead', {}, [h('tr', {}, headers.map((x) => h('th', { scope: 'col', text: x })))]),
    tbody,
  ]);
  return h('div', { class: 'table-wrap', role: 'region', 'aria-label': caption, tabindex: '0' }, [t]);
}
export const emptyRow = (cols, text) => h('tr', { class: 'empty' }, [h('td', { colspan: String(cols), text })]);

export function errorText(e) {
  return h('p', { class: 'error-text', role: 'alert', text: e?.message || String(e) });
}
export function badge(text, tone) { return h('span', { class: 'badge' + (tone ? ' ' + tone : ''), text }); }
export function statusBadge(status) {
  if (!status) return '—';
  const tone = { answered: 'ok', awaiting_confirmation: 'warn', failed: 'bad' }[status];
  return badge(STATUS[status] || status, tone);
}
