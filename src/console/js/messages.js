// Messages, confirmation cards and step lines, drawn as the visitor's widget
// draws them, so an operator reading a conversation sees what the visitor saw.
// The Tools page reuses argLines so its card preview matches too.

import { h, fmtTime, timeEl, num } from './dom.js';
import { STEP } from './labels.js';
import { markdown, safeUrl, link } from './markdown.js';

export function stepLine(status, label, call) {
  const [mark, tone, word] = STEP[status] || ['', '', status];
  return h('p', { class: 'step' + (tone ? ' ' + tone : ''), 'data-status': status, 'data-call': call || null }, [
    mark ? h('span', { class: 'mark', 'aria-hidden': 'true', text: mark + ' ' }) : null,
    h('strong', { text: word }),
    label ? ' · ' + label : null,
  ]);
}

/** `Name: value` lines, one per argument, as on the visitor's card. */
export function argLines(lines) {
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

export function bubble(m) {
  if (m.role === 'event') return h('p', { class: 'step', 'data-message': m.id, text: m.text });
  if (m.role === 'operator') {
    return h('div', { class: 'msg operator', 'data-message': m.id }, [
      h('p', { class: 'who' }, [`${m.name || 'Operator'} (operator) · `, timeEl(m.created_at)]),
      h('div', { class: 'body plain', text: m.text }),
    ]);
  }
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
  if (m.feedback) el.append(feedbackLine(m.feedback));
  return el;
}

/** The visitor's rating of an answer, with their comment as plain text. */
function feedbackLine(f) {
  const up = f.rating === 'up';
  return h('p', { class: 'feedback ' + (up ? 'ok' : 'bad'), 'data-rating': f.rating }, [
    h('span', { 'aria-hidden': 'true', text: (up ? '👍' : '👎') + ' ' }),
    h('strong', { text: up ? 'Rated helpful' : 'Rated not helpful' }), ' · ', timeEl(f.updated_at),
    f.comment ? h('span', { class: 'comment' }, [': “', h('bdi', { class: 'plain', text: f.comment }), '”']) : null,
  ]);
}
