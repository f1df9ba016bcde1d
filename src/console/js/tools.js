// The Tools page: each site's tools, a card preview anyone can try, and for
// admins a form to change a tool's label, description, policy and rule
// (confirm_when, SPEC §20: when the policy's gate applies). After a save
// the tool is redrawn from the server's answer, so the page never shows a
// change the server did not make.

import { h, view, pageTitle, field, select, errorText, timeEl, announce, enc, idPart, qs } from './dom.js';
import { POLICY_NAME } from './labels.js';
import { api } from './api.js';
import { state, siteName, isAdmin, siteOptions } from './state.js';
import { argLines } from './messages.js';

let toolsSite = '';
const RULE = 'Rule (confirm_when)';
const RULE_HINT = 'A CEL expression on the call’s arguments, such as args.amount > 100: the policy’s gate applies only when it is true. Empty: always.';

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

export function pageTools(ctx) {
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
  const el = h('article', { class: 'tool', id: 'tool-' + key, 'data-site': t.site, 'data-tool': t.name, 'data-policy': t.policy, 'data-confirm-when': t.confirm_when || null, 'aria-labelledby': `tool-${key}-name` });
  el.append(h('h3', { id: `tool-${key}-name` }, [h('code', { text: t.name })]));
  el.append(h('p', { class: 'changed muted small' }, t.changed
    ? ['Changed in console by ', t.changed_by || 'an operator', ' at ', timeEl(t.changed_at), '.']
    : ['As in the config file.']));
  const facts = [row('Source', t.source), h('div', { class: 'span-all' }, [h('dt', { text: 'Executor URL' }), h('dd', {}, [h('code', { text: t.url })])]), row('Timeout', `${t.timeout_s} s`)];
  if (!isAdmin()) {
    facts.unshift(row('Shown to visitors', t.label), row('Description', t.description || '—'), row('Policy', POLICY_NAME[t.policy] || t.policy),
      h('div', { class: 'span-all' }, [h('dt', { text: RULE }), h('dd', {}, [t.confirm_when ? h('code', { text: t.confirm_when }) : 'None: the policy always applies'])]));
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
  const radios = Object.entries(POLICY_NAME).map(([value, text]) => {
    const id = `tool-${key}-policy-${idPart(value)}`;
    return h('div', { class: 'radio' }, [
      h('input', { type: 'radio', id, name: `policy-${key}`, value, checked: t.policy === value }),
      h('label', { for: id, text }),
    ]);
  });
  // The rule, with its hint and the server's word on a rule that does not compile.
  const ruleId = `tool-${key}-rule`;
  const rule = h('input', {
    id: ruleId, type: 'text', class: 'mono', value: t.confirm_when || '', autocomplete: 'off', spellcheck: 'false',
    'aria-describedby': `${ruleId}-hint ${ruleId}-error`,
  });
  const ruleError = h('p', { id: `${ruleId}-error`, class: 'error-text small', 'aria-live': 'polite' });
  const ruleField = h('div', { class: 'field rule' }, [
    h('label', { for: ruleId, text: RULE }), rule,
    h('p', { id: `${ruleId}-hint`, class: 'hint muted small', text: RULE_HINT }), ruleError,
  ]);
  const clearRuleError = () => { ruleError.textContent = ''; rule.removeAttribute('aria-invalid'); };
  rule.addEventListener('input', clearRuleError);
  const status = h('p', { class: 'tool-status', role: 'status', text: message || '' });
  const save = h('button', { type: 'submit', class: 'save', text: 'Save' });
  const reset = h('button', { type: 'button', class: 'secondary reset', text: 'Reset to file', disabled: !t.changed });
  const fromFile = t.changed && t.file
    ? h('p', { class: 'muted small' }, [`The file says: “${t.file.label}”, ${POLICY_NAME[t.file.policy] || t.file.policy}`,
      t.file.confirm_when ? [' only when ', h('code', { text: t.file.confirm_when })] : null, '.'].flat())
    : null;
  const form = h('form', { class: 'tool-form', 'aria-label': 'Change ' + t.name }, [
    field('Shown to visitors', label), field('Description', description),
    h('fieldset', { class: 'policy' }, [h('legend', { text: 'Policy' }), ...radios]), ruleField,
    fromFile, h('div', { class: 'actions' }, [save, reset]), status,
  ]);
  async function send(change, done) {
    save.disabled = reset.disabled = true;
    clearRuleError();
    status.className = 'tool-status'; status.textContent = 'Saving…';
    try {
      const updated = await api('PATCH', path, change);
      const fresh = toolArticle(updated, done);
      article.replaceWith(fresh);
      fresh.querySelector('button.save')?.focus();
      announce(`${t.name}: ${done}`);
    } catch (e) {
      save.disabled = false; reset.disabled = !t.changed;
      status.className = 'tool-status error-text';
      if ('confirm_when' in change && /^confirm_when\b/.test(e.message)) {
        // Shown by the field it is about, which takes focus so it can be fixed.
        status.textContent = 'The rule needs fixing; nothing was changed.';
        ruleError.textContent = e.message;
        rule.setAttribute('aria-invalid', 'true');
        rule.focus();
      } else status.textContent = e.message;
    }
  }
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const change = {};
    if (label.value !== t.label) change.label = label.value;
    if (description.value !== t.description) change.description = description.value;
    const policy = form.querySelector(`input[name="policy-${key}"]:checked`)?.value;
    if (policy && policy !== t.policy) change.policy = policy;
    // Sent only when changed; '' turns the rule off (the gate then always applies).
    if (rule.value.trim() !== (t.confirm_when || '')) change.confirm_when = rule.value.trim();
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
