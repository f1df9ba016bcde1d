// Safe Markdown, as the widget renders it. Assistant text is untrusted, so this
// builds nodes and never parses HTML, and links pass safeUrl so only http(s)
// and mailto can ever be followed.

import { h } from './dom.js';

/** `u` as an absolute http(s) or mailto URL, or null for anything else. */
export function safeUrl(u) {
  try { const p = new URL(u, location.origin); return /^(https?|mailto):$/.test(p.protocol) ? p.href : null; } catch { return null; }
}

/** A link that opens in a new tab without giving that tab a handle on the console. */
export function link(url, text) {
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

/** `text` as a fragment of paragraphs, lists and code blocks; `[n]` links to `sources`. */
export function markdown(text, sources) {
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
