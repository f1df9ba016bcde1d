/* Deskbell widget: one script tag, a shadow root, no globals but `Deskbell`. */
(function () {
  'use strict';
  if (window.Deskbell) return;
  var script = document.currentScript;
  if (!script) return;
  var base = new URL(script.src, location.href).origin;
  var data = script.dataset;
  var site = data.site || '';
  var key = 'deskbell:' + site;
  var CSS = __DESKBELL_CSS__;
  // The widget's words (SPEC §22): English is built in; the site's language
  // and its overrides come from the server before the widget draws itself.
  var EN = __DESKBELL_EN__;
  var L = { locale: 'en', dir: 'ltr', strings: EN };
  function say(key, params) {
    var text = L.strings[key] || EN[key] || key;
    return text.replace(/\{(\w+)\}/g, function (all, name) { return params && name in params ? String(params[name]) : all; });
  }
  function num(n, digits) {
    try { return new Intl.NumberFormat(L.locale, digits ? { minimumIntegerDigits: digits } : {}).format(n); } catch (e) { return String(n); }
  }
  // Calls made before the widget is drawn (`Deskbell.identify` on page load)
  // wait for it.
  var impl = null, queued = [];
  function later(name) { return function () { if (impl) impl[name].apply(null, arguments); else queued.push([name, arguments]); }; }
  window.Deskbell = Object.freeze({ open: later('open'), close: later('close'), identify: later('identify'), reset: later('reset') });
  var languages = (navigator.languages && navigator.languages.length ? navigator.languages : [navigator.language || 'en']).join(',');
  var asked = new AbortController();
  setTimeout(function () { asked.abort(); }, 3000);
  fetch(base + '/v1/sites/' + encodeURIComponent(site) + '/strings?lang=' + encodeURIComponent(languages), { signal: asked.signal })
    .then(function (r) { return r.ok ? r.json() : null; })
    .catch(function () { return null; })
    .then(function (got) { if (got && got.strings) L = got; start(); });

  function start() {

  // ---- state kept in the host page's local storage ----------------------------
  function load() { try { return JSON.parse(localStorage.getItem(key)) || {}; } catch (e) { return {}; } }
  function save() { try { localStorage.setItem(key, JSON.stringify(state)); } catch (e) { /* private mode */ } }
  var state = load();
  var identity = null;
  var busy = false;
  var cards = []; // live cards: {el, step, conversation, timer}

  // ---- DOM ----------------------------------------------------------------------
  function h(tag, attrs, kids) {
    var el = document.createElement(tag);
    for (var k in attrs || {}) {
      if (k === 'text') el.textContent = attrs[k];
      else if (k === 'class') el.className = attrs[k];
      else if (k.slice(0, 2) === 'on') el.addEventListener(k.slice(2), attrs[k]);
      else el.setAttribute(k, attrs[k]);
    }
    (kids || []).forEach(function (c) { if (c) el.appendChild(typeof c === 'string' ? document.createTextNode(c) : c); });
    return el;
  }
  var host = document.createElement('deskbell-widget');
  if (data.position === 'left') host.setAttribute('data-position', 'left');
  var shadow = host.attachShadow({ mode: 'open' });
  var style = h('style', { text: CSS });
  var title = data.title || say('default_title');
  var icon = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  icon.setAttribute('viewBox', '0 0 24 24'); icon.setAttribute('aria-hidden', 'true');
  var path = document.createElementNS('http://www.w3.org/2000/svg', 'path');
  path.setAttribute('d', 'M4 4h16a2 2 0 0 1 2 2v10a2 2 0 0 1-2 2H9l-5 4v-4a2 2 0 0 1-2-2V6a2 2 0 0 1 2-2z');
  icon.appendChild(path);
  var launcher = h('button', { class: 'launcher', type: 'button', 'aria-label': say('open_chat', { title: title }), 'aria-expanded': 'false', 'aria-controls': 'deskbell-panel', onclick: function () { toggle(); } }, [icon]);
  var log = h('div', { class: 'log', role: 'log', 'aria-live': 'polite', 'aria-relevant': 'additions text', 'aria-label': say('conversation_label') });
  var input = h('textarea', { id: 'deskbell-input', rows: '1', placeholder: say('input_placeholder'), onkeydown: onKey });
  var send = h('button', { type: 'submit', text: say('send') });
  var form = h('form', { onsubmit: function (e) { e.preventDefault(); submit(); } }, [h('label', { class: 'sr', for: 'deskbell-input', text: say('message_label') }), input, send]);
  var heading = h('h2', { id: 'deskbell-title', text: title });
  // A longer name must contain the visible word (axe: label-content-name-
  // mismatch), which not every language's pair does: else it is a tooltip.
  var freshText = say('new_conversation'), freshLabel = say('new_conversation_label');
  var fresh = h('button', { type: 'button', text: freshText, title: freshLabel, onclick: function () { newConversation(); } });
  if ((' ' + freshLabel.toLowerCase() + ' ').indexOf(' ' + freshText.toLowerCase() + ' ') >= 0) fresh.setAttribute('aria-label', freshLabel);
  var close = h('button', { type: 'button', text: '✕', 'aria-label': say('close_chat'), onclick: function () { toggle(false); } });
  var person = h('button', { type: 'button', class: 'person', text: say('talk_to_person'), hidden: '', onclick: function () { handoff(); } });
  var transcript = h('button', { type: 'button', class: 'transcript', text: '⤓', title: say('transcript_download'), 'aria-label': say('transcript_download'), onclick: function () { download(); } });
  var holderLine = h('p', { class: 'holder', role: 'status', 'aria-live': 'polite', hidden: '' });
  var panel = h('section', { class: 'panel', id: 'deskbell-panel', role: 'dialog', 'aria-labelledby': 'deskbell-title', hidden: '' }, [h('header', {}, [heading, person, transcript, fresh, close]), holderLine, log, form]);
  panel.addEventListener('keydown', function (e) { if (e.key === 'Escape') toggle(false); });
  var root = h('div', { class: 'root', dir: L.dir, lang: L.locale }, [panel, launcher]);
  if (data.accent) root.style.setProperty('--deskbell-accent', data.accent);
  shadow.appendChild(style); shadow.appendChild(root);

  function mount() { document.body.appendChild(host); if (state.open) toggle(true); }
  if (document.body) mount(); else document.addEventListener('DOMContentLoaded', mount);

  function isOpen() { return !panel.hidden; }
  function toggle(open) {
    if (open === undefined) open = !isOpen();
    panel.hidden = !open;
    launcher.setAttribute('aria-expanded', String(open));
    launcher.setAttribute('aria-label', say(open ? 'close_chat_titled' : 'open_chat', { title: title }));
    state.open = open; save();
    if (open) { if (!log.childElementCount) restore(); input.focus(); } else { launcher.focus(); }
  }
  function onKey(e) { if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); submit(); } }
  function scroll() { log.scrollTop = log.scrollHeight; }

  // ---- safe Markdown: builds nodes, never parses HTML ----------------------------
  function safeUrl(u) { try { var p = new URL(u, base); return /^(https?|mailto):$/.test(p.protocol) ? p.href : null; } catch (e) { return null; } }
  function inline(text, parent, sources) {
    var re = /(\*\*[^*]+\*\*|\*[^*\s][^*]*\*|`[^`]+`|\[[^\]]+\]\([^)\s]+\)|\[\d+\]|https?:\/\/[^\s<)]+)/g;
    var last = 0, m;
    while ((m = re.exec(text))) {
      if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
      var t = m[0];
      if (t[0] === '`') parent.appendChild(h('code', { text: t.slice(1, -1) }));
      else if (t.slice(0, 2) === '**') inline(t.slice(2, -2), parent.appendChild(h('strong')), sources);
      else if (t[0] === '*') inline(t.slice(1, -1), parent.appendChild(h('em')), sources);
      else if (/^\[\d+\]$/.test(t)) {
        var n = Number(t.slice(1, -1));
        var src = sources && sources.filter(function (s) { return s.n === n; })[0];
        var url = src && src.url && safeUrl(src.url);
        parent.appendChild(h('sup', {}, [url ? h('a', { href: url, target: '_blank', rel: 'noopener noreferrer', 'aria-label': say('source_n', { n: num(n) }), text: '[' + n + ']' }) : '[' + n + ']']));
      } else if (t[0] === '[') {
        var mm = /^\[([^\]]+)\]\(([^)\s]+)\)$/.exec(t), href = safeUrl(mm[2]);
        parent.appendChild(href ? h('a', { href: href, target: '_blank', rel: 'noopener noreferrer', text: mm[1] }) : document.createTextNode(mm[1]));
      } else {
        var u = safeUrl(t);
        parent.appendChild(u ? h('a', { href: u, target: '_blank', rel: 'noopener noreferrer', text: t }) : document.createTextNode(t));
      }
      last = re.lastIndex;
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  }
  function markdown(text, sources) {
    var out = document.createDocumentFragment();
    var blocks = text.split(/```/);
    blocks.forEach(function (block, i) {
      if (i % 2) { out.appendChild(h('pre', {}, [h('code', { text: block.replace(/^\w*\n/, '') })])); return; }
      block.split(/\n{2,}/).forEach(function (para) {
        if (!para.trim()) return;
        var lines = para.split('\n');
        var bullet = lines.every(function (l) { return /^\s*[-*]\s+/.test(l); });
        var numbered = lines.every(function (l) { return /^\s*\d+[.)]\s+/.test(l); });
        if (bullet || numbered) {
          var list = h(bullet ? 'ul' : 'ol');
          lines.forEach(function (l) { inline(l.replace(/^\s*([-*]|\d+[.)])\s+/, ''), list.appendChild(h('li')), sources); });
          out.appendChild(list);
        } else {
          var p = h('p');
          lines.forEach(function (l, j) { if (j) p.appendChild(h('br')); inline(l.replace(/^#{1,6}\s+/, ''), p, sources); });
          out.appendChild(p);
        }
      });
    });
    return out;
  }

  // ---- messages ------------------------------------------------------------------
  function visitorBubble(text) { log.appendChild(h('div', { class: 'msg visitor', text: text })); scroll(); }
  function assistantBubble(id) {
    var el = h('div', { class: 'msg assistant', 'data-message': id || '' });
    var body = h('div', { class: 'body' });
    el.appendChild(body); log.appendChild(el); scroll();
    return { el: el, body: body, text: '', sources: [] };
  }
  function render(b) { b.body.replaceChildren(markdown(b.text, b.sources)); scroll(); }
  function citations(b, items) {
    b.sources = items; render(b);
    var list = h('ol', { class: 'sources', 'aria-label': say('sources') });
    items.forEach(function (s) {
      var url = s.url && safeUrl(s.url);
      list.appendChild(h('li', { value: String(s.n) }, [url ? h('a', { href: url, target: '_blank', rel: 'noopener noreferrer', text: s.title }) : s.title]));
    });
    b.el.appendChild(list);
  }
  // A line of a call keeps its call id and label, so a later change of status
  // (a teammate's decision, SPEC §20) can redraw it in place.
  function stepLine(parent, label, status, callId) {
    var marks = { succeeded: ['✓', 'ok', ''], confirmed: ['✓', 'ok', say('step_confirmed')], failed: ['✗', 'bad', say('step_failed')], cancelled: ['', '', say('step_cancelled')], expired: ['', '', say('step_expired')], running: ['…', '', ''], event: ['', '', ''], awaiting_approval: ['', '', say('step_awaiting_approval')] };
    var m = marks[status] || ['', '', status];
    var line = h('div', callId ? { class: 'step ' + m[1], 'data-status': status, 'data-call': callId, 'data-label': label } : { class: 'step ' + m[1], 'data-status': status }, [
      m[0] ? h('span', { class: 'mark', 'aria-hidden': 'true', text: m[0] + ' ' }) : null,
      m[2] ? h('strong', { text: m[2] }) : null,
      (m[2] ? ' · ' : '') + label + (status === 'running' ? '…' : '')
    ]);
    parent.appendChild(line); scroll();
    return line;
  }
  function errorLine(text) { log.appendChild(h('div', { class: 'error', role: 'alert', text: text })); scroll(); }

  var EXPLAINED = ['rate_limited', 'too_many_streams', 'daily_budget_exhausted', 'provider_unavailable', 'confirmation_expired', 'call_not_pending', 'message_too_long', 'origin_not_allowed'];
  function explain(code, retry) { return say(EXPLAINED.indexOf(code) >= 0 ? 'error_' + code : 'error_generic', { seconds: num(Number(retry) || 1) }); }

  // ---- API -----------------------------------------------------------------------
  async function token(renew) {
    if (state.token && !renew) return state.token;
    var body = { site: site };
    if (identity) for (var k in identity) body[k] = identity[k];
    var r = await fetch(base + '/v1/visitors', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    var j = await r.json();
    if (!r.ok) throw { code: j.error && j.error.code };
    state.token = j.token; state.visitor = j.visitor; state.handoff = !!j.handoff; save();
    return j.token;
  }
  async function call(method, path, body) {
    for (var attempt = 0; attempt < 2; attempt++) {
      var r = await fetch(base + path, { method: method, headers: { 'content-type': 'application/json', authorization: 'Bearer ' + await token(attempt > 0) }, body: body && JSON.stringify(body) });
      if (r.status !== 401) return r;
    }
    return r;
  }
  async function stream(response, handlers, onId) {
    var reader = response.body.getReader(), dec = new TextDecoder(), buf = '';
    for (;;) {
      var chunk = await reader.read();
      if (chunk.done) break;
      buf += dec.decode(chunk.value, { stream: true });
      var i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        var block = buf.slice(0, i); buf = buf.slice(i + 2);
        var name = /^event: ?(.*)$/m.exec(block), payload = /^data: ?(.*)$/m.exec(block), id = /^id: ?(.*)$/m.exec(block);
        if (name && payload && handlers[name[1]]) handlers[name[1]](JSON.parse(payload[1]));
        if (id && onId) onId(id[1]);
      }
    }
  }
  function setBusy(on) { busy = on; send.disabled = on; }

  // `answering` is the card being answered, told of the decision, of the new
  // card an edit raised, and of an edit the server refused.
  async function ask(body, answering) {
    setBusy(true);
    var typing = h('div', { class: 'msg assistant typing', text: say('typing'), 'aria-label': say('assistant_typing_label') });
    log.appendChild(typing); scroll();
    var bubble = null;
    try {
      var r = await call('POST', '/v1/ask', body);
      // A person holds the conversation: the message is theirs, no answer streams.
      if (r.status === 202) {
        typing.remove();
        var ack = await r.json().catch(function () { return {}; });
        if (ack.offline && !log.querySelector('.offline')) offline(ack.offline);
        return;
      }
      if (!r.ok) {
        var j = await r.json().catch(function () { return {}; });
        var code = j.error && j.error.code;
        typing.remove();
        // A refused edit is said on its card, which stays answerable.
        if (code === 'invalid_edit' && answering) answering.invalid(j.error.message || say('error_invalid_edit'));
        else errorLine(explain(code, r.headers.get('retry-after')));
        return code;
      }
      await stream(r, {
        decision: function (d) { if (answering) answering.decided(d.status); },
        turn: function (t) { typing.remove(); if (state.conversation !== t.conversation) state.seen = 0; state.conversation = t.conversation; save(); showHolder({ holder: state.holder || 'assistant' }); bubble = assistantBubble(t.message); },
        delta: function (d) { if (!bubble) bubble = assistantBubble(); bubble.text += d.text; render(bubble); },
        step: function (s) {
          if (!bubble) return;
          var old = bubble.el.querySelector('[data-call="' + s.call + '"]');
          var line = stepLine(bubble.el, s.label, s.status, s.call);
          if (old) old.replaceWith(line);
        },
        confirm: function (c) { if (bubble) showCard(bubble.el, c, state.conversation); else if (answering) answering.replaced(c); },
        citations: function (c) { if (bubble) citations(bubble, c.items); },
        // The server's words are English; the code says which of ours to show.
        error: function (e) { errorLine(say(e.code === 'internal_error' ? 'error_generic' : 'error_answer_incomplete')); },
        holder: function (e) { showHolder(e); },
        offline: function (e) { offline(e.offline); },
        done: function (d) { typing.remove(); if (bubble && d.status === 'answered') feedbackRow(bubble.el, bubble.el.getAttribute('data-message'), state.conversation, null); listen(); }
      });
    } catch (e) {
      typing.remove();
      errorLine(say(navigator.onLine === false ? 'error_offline' : 'error_connection_interrupted'));
    } finally {
      typing.remove();
      setBusy(false);
      input.focus();
    }
  }

  function submit() {
    var text = input.value.trim();
    if (!text || busy) return;
    input.value = '';
    visitorBubble(text);
    ask({ conversation: state.conversation || null, message: text });
  }

  // ---- the confirmation card ----------------------------------------------------
  var fieldSeq = 0, same = function (a, b) { return JSON.stringify(a) === JSON.stringify(b); };
  function row(dt, dd) { return h('div', { style: 'display:contents' }, [dt, dd]); }
  // An editable field (SPEC §20) as an input prefilled with the call's value. A
  // select's options carry their JSON values by index, never parsed from text.
  function fieldInput(f) {
    var id = 'deskbell-field-' + (++fieldSeq), t = f.input, el;
    if (t === 'select') {
      el = h('select', { id: id }, f.value === undefined ? [h('option', { value: '', text: '—' })] : []);
      (f.options || []).forEach(function (o, i) { el.appendChild(h('option', { value: String(i), text: o.title })).selected = same(o.value, f.value); });
    } else {
      el = h('input', t === 'boolean' ? { id: id, type: 'checkbox' } : t === 'string' ? { id: id, type: 'text', dir: 'auto' } : { id: id, type: 'number', step: t === 'integer' ? '1' : 'any' });
      if (t === 'boolean') el.checked = f.value === true; else if (f.value !== undefined) el.value = String(f.value);
    }
    return { f: f, el: el, row: row(h('dt', {}, [h('label', { for: id }, [h('bdi', { text: f.name })])]), h('dd', {}, [el])) };
  }
  // The fields the visitor changed, typed as the schema wants them. An empty
  // input that had no value, or an unticked box that had none, is no change.
  function editsOf(fields) {
    var out = {};
    fields.forEach(function (x) {
      var f = x.f, el = x.el, t = f.input, v;
      if (t === 'boolean') v = el.checked;
      else if (t === 'select') v = el.value === '' ? undefined : f.options[Number(el.value)].value;
      else if (el.value === '' && (t !== 'string' || f.value === undefined)) v = undefined;
      else v = t === 'integer' ? parseInt(el.value, 10) : t === 'number' ? Number(el.value) : el.value;
      if (v !== undefined && !same(v, t === 'boolean' && f.value === undefined ? false : f.value)) out[f.field] = v;
    });
    return out;
  }
  function quotaText(q) { return say(q.window === 'day' ? 'quota_left_today' : 'quota_left_this_month', { left: num(q.left), max: num(q.max) }); }
  function showCard(parent, c, conversation) {
    var left = h('p', { class: 'left', 'aria-live': 'off' }), note = h('p', { class: 'note', role: 'alert' });
    var list = h('dl'), editable = c.editable || [], fields = [];
    function addField(f) { var x = fieldInput(f); fields.push(x); list.appendChild(x.row); }
    // Each editable line becomes its input where the line stands; fields the call left out follow.
    c.arguments.forEach(function (a) {
      var f = editable.filter(function (e) { return e.name === a.name; })[0];
      if (f) addField(f); else list.appendChild(row(h('dt', {}, [h('bdi', { text: a.name })]), h('dd', {}, [h('bdi', { text: a.value })])));
    });
    editable.forEach(function (f) { if (!fields.some(function (x) { return x.f === f; })) addField(f); });
    var cancel = h('button', { type: 'button', class: 'cancel', text: say('card_cancel'), 'aria-label': say('card_cancel_label', { label: c.label }) });
    var confirm = h('button', { type: 'button', class: 'confirm', text: say('card_confirm'), 'aria-label': say('card_confirm_label', { label: c.label }) });
    var el = h('div', { class: 'card', role: 'group', tabindex: '-1', 'aria-label': say('card_label', { label: c.label }), 'data-call': c.call }, [
      h('h3', {}, [h('bdi', { text: c.label })]), list, c.quota ? h('p', { class: 'quota', text: quotaText(c.quota) }) : null, left, note, h('div', { class: 'actions' }, [cancel, confirm])]);
    parent.appendChild(el); scroll();
    var card = { el: el, conversation: conversation, settle: function (status) { settle(status); } };
    var expires = Date.parse(c.expires_at);
    function retire() { clearInterval(card.timer); cards = cards.filter(function (x) { return x !== card; }); }
    function settle(status) { retire(); el.replaceWith(stepLine(parent, c.label, status, c.call)); }
    function lock(on) { cancel.disabled = confirm.disabled = on; fields.forEach(function (x) { x.el.disabled = on; }); }
    function tick() {
      var s = Math.max(0, Math.round((expires - Date.now()) / 1000));
      if (s <= 0) { settle('expired'); return; }
      left.textContent = say('card_expires_in', { time: num(Math.floor(s / 60)) + ':' + num(s % 60, 2) });
    }
    async function answer(decision) {
      // A card is answered only while the widget is open on its conversation.
      if (busy || !isOpen() || state.conversation !== conversation) return;
      var body = { conversation: conversation, call: c.call, decision: decision, signature: c.signature };
      var bad = fields.filter(function (x) { return !x.el.checkValidity(); })[0], edits = editsOf(fields);
      note.textContent = '';
      if (decision === 'confirm' && bad) { note.textContent = say('card_check_field', { field: bad.f.name }); bad.el.focus(); return; }
      if (decision === 'confirm' && Object.keys(edits).length) body.edits = edits;
      lock(true);
      var closed = null, next = null;
      var code = await ask(body, {
        // An edit closes this card and the server signs a new one for the edited
        // call: the new card takes this one's place, as the visitor's own change.
        decided: function (status) { if (body.edits && status === 'cancelled') closed = status; else settle(status); },
        replaced: function (n) { retire(); next = showCard(parent, n, conversation); el.replaceWith(next); },
        invalid: function (message) { note.textContent = message; }
      });
      if (next) next.focus();
      else if (closed) settle(closed);
      else if (code === 'confirmation_expired') settle('expired');
      else if (code === 'call_not_pending') { clearInterval(card.timer); el.querySelector('.actions').remove(); left.textContent = ''; }
      else if (code) { lock(false); if (code === 'invalid_edit') fields[0].el.focus(); }
    }
    cancel.addEventListener('click', function () { answer('cancel'); });
    confirm.addEventListener('click', function () { answer('confirm'); });
    card.timer = setInterval(tick, 1000); tick();
    cards.push(card);
    return el;
  }

  // ---- history ---------------------------------------------------------------------
  // An assistant message of the history, or one a teammate's decision brought live.
  function assistantMessage(m, conversation) {
    var b = assistantBubble(m.id); b.text = m.text || ''; b.sources = m.citations || []; render(b);
    if (m.citations && m.citations.length) citations(b, m.citations);
    (m.steps || []).forEach(function (s) {
      if (s.kind === 'confirmation' && s.status === 'pending' && s.signature) showCard(b.el, s, conversation);
      else stepLine(b.el, s.label, s.status, s.call);
    });
    if (m.status === 'failed' && !m.text) errorLine(say('error_answer_incomplete'));
    if (m.status === 'answered') feedbackRow(b.el, m.id, conversation, m.feedback);
  }
  async function restore() {
    if (data.greeting !== '') log.appendChild(h('div', { class: 'msg assistant greeting' }, [h('div', { class: 'body', text: data.greeting || say('greeting') })]));
    if (!state.conversation || !state.token) return;
    try {
      var r = await call('GET', '/v1/conversations/' + encodeURIComponent(state.conversation));
      if (r.status === 404) { state.conversation = null; save(); return; }
      if (!r.ok) { var j = await r.json().catch(function () { return {}; }); errorLine(explain(j.error && j.error.code, r.headers.get('retry-after'))); return; }
      var convo = await r.json();
      convo.messages.forEach(function (m) {
        if (m.role === 'visitor') { visitorBubble(m.text); return; }
        if (m.role === 'operator') { operatorBubble(m); return; }
        if (m.role === 'event') { stepLine(log, m.text, 'event'); return; }
        assistantMessage(m, convo.id);
      });
      showHolder({ holder: state.holder || 'assistant', name: state.holderName });
      listen();
    } catch (e) { errorLine(say('error_offline')); }
  }
  function clearLog() { cards.forEach(function (c) { clearInterval(c.timer); }); cards = []; log.replaceChildren(); }
  function newConversation() { state.conversation = null; state.seen = 0; save(); stopListening(); showHolder({ holder: 'assistant' }); clearLog(); restore(); input.focus(); }

  // ---- a person at the desk (SPEC §19) --------------------------------------------
  var listening = null; // the conversation whose live channel is open
  // A message comes once: a replay after a reconnect or a reload finds it drawn.
  function onScreen(id) { return !!log.querySelector('.msg[data-message="' + window.CSS.escape(id) + '"]'); }
  function operatorBubble(m) {
    if (onScreen(m.id)) return;
    // An operator's words are plain text: no Markdown, no links made.
    log.appendChild(h('div', { class: 'msg operator', 'data-message': m.id }, [h('span', { class: 'who', text: m.name || say('support_team') }), h('div', { class: 'body', text: m.text })]));
    scroll();
  }
  function showHolder(e) {
    var was = state.holder || 'assistant';
    if (was !== 'assistant' && e.holder === 'assistant' && !holderLine.hidden) stepLine(log, say('back_with_assistant'), 'event');
    state.holder = e.holder; state.holderName = e.name || null; save();
    holderLine.hidden = e.holder === 'assistant';
    holderLine.textContent = e.holder === 'operator' ? (e.name ? say('holder_operator', { name: e.name }) : say('holder_operator_team')) : e.holder === 'queue' ? say('holder_queue') : '';
    person.hidden = !(state.handoff && state.conversation && e.holder === 'assistant');
  }
  async function handoff() {
    if (!state.conversation) return;
    person.disabled = true;
    try {
      var r = await call('POST', '/v1/conversations/' + encodeURIComponent(state.conversation) + '/handoff', {});
      var j = await r.json().catch(function () { return {}; });
      if (!r.ok) { errorLine(explain(j.error && j.error.code, r.headers.get('retry-after'))); return; }
      if (j.offline) offline(j.offline); else { showHolder(j); listen(); }
    } catch (e) { errorLine(say('error_connection_interrupted')); }
    finally { person.disabled = false; }
  }
  function offline(text) {
    var email = h('input', { type: 'email', id: 'deskbell-email', autocomplete: 'email', required: '' });
    var box = h('form', { class: 'offline', 'aria-label': say('offline_form_label') }, [h('p', { text: text }), h('label', { for: 'deskbell-email', text: say('offline_email_label') }), email, h('button', { type: 'submit', text: say('offline_leave_email') })]);
    box.addEventListener('submit', async function (e) {
      e.preventDefault();
      var r = await call('POST', '/v1/conversations/' + encodeURIComponent(state.conversation) + '/contact', { email: email.value });
      if (r.ok) box.replaceWith(h('p', { class: 'step ok', text: say('offline_email_saved') }));
      else errorLine(say('offline_email_required'));
    });
    log.appendChild(box); scroll();
  }
  var typingEl = null, typingTimer = null;
  function typingOff() { clearTimeout(typingTimer); if (typingEl) typingEl.remove(); typingEl = null; }
  function typingOn(e) {
    // A replayed event of long ago says nothing about now.
    if (Date.now() - Date.parse(e.at) > 10000) return;
    typingOff();
    typingEl = h('div', { class: 'msg operator typing', text: e.name ? say('operator_typing', { name: e.name }) : say('support_team_typing') });
    log.appendChild(typingEl); scroll();
    typingTimer = setTimeout(typingOff, 5000);
  }
  // An operator cancelled a card: it closes here too, not only on its next click.
  function closeCard(e) {
    // A line waiting for a teammate turns into the decision's line (SPEC §20).
    // Only a waiting line changes, so a replayed older event cannot undo a newer line.
    if (e.status !== 'awaiting_approval') log.querySelectorAll('.step[data-status="awaiting_approval"][data-call="' + window.CSS.escape(e.call) + '"]').forEach(function (old) {
      old.replaceWith(stepLine(old.parentNode, old.getAttribute('data-label'), e.status, e.call));
    });
    cards.filter(function (c) { return c.el.getAttribute('data-call') === e.call; }).forEach(function (c) { c.settle(e.status); });
  }
  // The assistant's continuation after a teammate decided (SPEC §20).
  function answerEvent(m) { if (!onScreen(m.id)) assistantMessage(m, state.conversation); }
  function stopListening() { if (listening) listening.abort(); listening = null; }
  // The live channel: operator replies, changes of holder and teammates'
  // decisions, resumed after the last event seen (Last-Event-ID), reconnecting
  // after a drop. A site without a desk opens it only while a call waits for a
  // teammate, and keeps it open for the rest of the conversation.
  async function listen() {
    var convo = state.conversation;
    if (!(state.handoff || log.querySelector('.step[data-status="awaiting_approval"]')) || !convo || (listening && listening.convo === convo)) return;
    stopListening();
    var ctl = new AbortController(); ctl.convo = convo; listening = ctl;
    var renew = false;
    for (var wait = 1000; listening === ctl; wait = Math.min(wait * 2, 30000)) {
      try {
        var headers = { authorization: 'Bearer ' + await token(renew) };
        if (state.seen) headers['last-event-id'] = String(state.seen);
        var r = await fetch(base + '/v1/conversations/' + encodeURIComponent(convo) + '/events', { headers: headers, signal: ctl.signal });
        // A token the server no longer takes is renewed once, as every call does.
        renew = r.status === 401 && !renew;
        if (renew) continue;
        if (r.status === 404 || r.status === 401) { if (listening === ctl) listening = null; return; }
        if (r.ok) { wait = 1000; await stream(r, { message: function (m) { typingOff(); operatorBubble(m); }, holder: showHolder, typing: typingOn, card: closeCard, answer: answerEvent }, function (id) { state.seen = Number(id); save(); }); }
      } catch (e) { if (ctl.signal.aborted) return; }
      await new Promise(function (ok) { setTimeout(ok, wait); });
    }
  }

  // ---- feedback and transcript (issue 41) -------------------------------------------
  // Thumbs under an answer: a click rates it at once; the optional comment
  // that appears then is sent with the same rating, which replaces the first.
  function feedbackRow(parent, id, conversation, given) {
    if (!id || parent.querySelector('.rate')) return;
    var up = h('button', { type: 'button', class: 'thumb', 'aria-pressed': 'false', 'aria-label': say('feedback_helpful'), title: say('feedback_helpful'), text: '👍' });
    var down = h('button', { type: 'button', class: 'thumb', 'aria-pressed': 'false', 'aria-label': say('feedback_not_helpful'), title: say('feedback_not_helpful'), text: '👎' });
    var comment = h('textarea', { class: 'comment', rows: '2', maxlength: '1000', placeholder: say('feedback_comment_placeholder'), 'aria-label': say('feedback_comment_placeholder'), hidden: '' });
    var sendIt = h('button', { type: 'button', class: 'send-feedback', text: say('feedback_send'), hidden: '' });
    var thanks = h('span', { class: 'thanks', role: 'status' });
    var chosen = given && given.rating, said = given && given.comment;
    function pressed() { up.setAttribute('aria-pressed', String(chosen === 'up')); down.setAttribute('aria-pressed', String(chosen === 'down')); }
    async function rate(rating, text) {
      // A new rating replaces the stored one: it keeps the comment already sent.
      if (text === undefined) text = said;
      var body = { rating: rating };
      if (text) body.comment = text;
      try {
        var r = await call('POST', '/v1/conversations/' + encodeURIComponent(conversation) + '/messages/' + encodeURIComponent(id) + '/feedback', body);
        if (!r.ok) { var j = await r.json().catch(function () { return {}; }); errorLine(explain(j.error && j.error.code, r.headers.get('retry-after'))); return false; }
      } catch (e) { errorLine(say('error_connection_interrupted')); return false; }
      chosen = rating; said = text; pressed(); thanks.textContent = say('feedback_thanks');
      return true;
    }
    function pick(rating) { rate(rating).then(function (ok) { if (ok) { comment.hidden = sendIt.hidden = false; comment.focus(); } }); }
    up.addEventListener('click', function () { pick('up'); });
    down.addEventListener('click', function () { pick('down'); });
    sendIt.addEventListener('click', function () { if (chosen) rate(chosen, comment.value.trim()).then(function (ok) { if (ok) { comment.hidden = sendIt.hidden = true; } }); });
    pressed();
    parent.appendChild(h('div', { class: 'rate' }, [up, down, thanks, comment, sendIt]));
  }
  // The conversation as a printable HTML page of its own, built as a document
  // (text is set, never parsed) and saved through a download link.
  async function download() {
    if (!state.conversation) return;
    try {
      var r = await call('GET', '/v1/conversations/' + encodeURIComponent(state.conversation));
      if (!r.ok) { var j = await r.json().catch(function () { return {}; }); errorLine(explain(j.error && j.error.code)); return; }
      var convo = await r.json();
    } catch (e) { errorLine(say('error_connection_interrupted')); return; }
    var heading = say('transcript_heading', { title: title });
    var doc = document.implementation.createHTMLDocument(heading);
    doc.documentElement.lang = L.locale; doc.documentElement.dir = L.dir;
    var css = doc.createElement('style');
    css.textContent = 'body{font:15px/1.5 system-ui,sans-serif;max-width:42em;margin:2em auto;padding:0 1em;color:#111}p{white-space:pre-wrap;margin:.2em 0 1em}h2{font-size:13px;margin:0;color:#444}';
    doc.head.appendChild(css);
    var when = function (at) { try { return new Intl.DateTimeFormat(L.locale, { dateStyle: 'medium', timeStyle: 'short' }).format(new Date(at)); } catch (e) { return at; } };
    var top = doc.createElement('h1'); top.textContent = heading; doc.body.appendChild(top);
    convo.messages.forEach(function (m) {
      var who = m.role === 'visitor' ? say('transcript_visitor') : m.role === 'operator' ? (m.name || say('support_team')) : m.role === 'event' ? '' : say('transcript_assistant');
      var line = doc.createElement('h2'); line.textContent = (who ? who + ' · ' : '') + when(m.created_at);
      var text = doc.createElement('p'); text.textContent = m.text;
      doc.body.appendChild(line); doc.body.appendChild(text);
      // What ran or was confirmed, as the steps under the answer say it.
      (m.steps || []).forEach(function (s) {
        var word = { confirmed: 'step_confirmed', failed: 'step_failed', cancelled: 'step_cancelled', expired: 'step_expired', awaiting_approval: 'step_awaiting_approval' }[s.status];
        var step = doc.createElement('p'); step.className = 'step';
        step.textContent = '• ' + (word ? say(word) + ' · ' : '') + s.label + (s.arguments && s.arguments.length ? ' (' + s.arguments.map(function (a) { return a.name + ': ' + a.value; }).join(', ') + ')' : '');
        doc.body.appendChild(step);
      });
    });
    var blob = new Blob(['<!doctype html>\n' + doc.documentElement.outerHTML], { type: 'text/html' });
    var link = h('a', { href: URL.createObjectURL(blob), download: 'conversation-' + convo.id + '.html' });
    link.click();
    setTimeout(function () { URL.revokeObjectURL(link.href); }, 10000);
  }

  impl = {
    open: function () { toggle(true); },
    close: function () { toggle(false); },
    // An identity token (expires) or a user id with its hash (does not).
    identify: function (user) { identity = user.identity_token ? { identity_token: String(user.identity_token) } : { user_id: String(user.user_id), user_hash: String(user.user_hash) }; state = {}; save(); clearLog(); if (isOpen()) restore(); },
    reset: function () { identity = null; state = {}; try { localStorage.removeItem(key); } catch (e) { /* ignore */ } clearLog(); if (isOpen()) restore(); }
  };
  queued.forEach(function (q) { impl[q[0]].apply(null, q[1]); });
  }
})();
