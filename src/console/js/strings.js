// The Widget words page (SPEC §22): every string of a site's widget with the
// catalog's English, the config file's words and the console's, and for admins
// a form to give a string the site's own words in every language or in one.
// The console's words win over the file's until reset.

import { h, view, pageTitle, field, select, errorText, announce, enc, idPart, table } from './dom.js';
import { api } from './api.js';
import { state, siteName, isAdmin } from './state.js';

let stringsSite = '';

export function pageStrings(ctx) {
  stringsSite = stringsSite || state.sites[0]?.id || '';
  const site = select('strings-site', state.sites.map((s) => [s.id, s.name || s.id]), stringsSite);
  const list = h('div', { id: 'strings-list' }, [h('p', { class: 'muted loading', text: 'Loading the widget’s words…' })]);
  view.append(pageTitle('Widget words'),
    h('p', { class: 'muted' }, [isAdmin()
      ? 'The console’s words win over the config file’s and the catalog’s; a widget shows them within five minutes (its words are cached).'
      : 'You can read the widget’s words; only admins can change them.']),
    h('form', { class: 'filters', 'aria-label': 'Choose a site' }, [field('Site', site)]), list);
  async function load() {
    try {
      const v = await api('GET', '/sites/' + enc(stringsSite) + '/strings');
      if (!ctx.alive) return;
      list.replaceChildren(...render(v, load));
    } catch (e) {
      if (ctx.alive) list.replaceChildren(errorText(e));
    }
  }
  site.addEventListener('change', () => { stringsSite = site.value; load(); });
  load();
}

function render(v, reload) {
  const shown = (s) => s.console.map((c) => `${c.language === '*' ? 'All languages' : c.language}: ${c.text}`).join('\n');
  const rows = v.strings.map((s) => h('tr', { 'data-key': s.key }, [
    h('th', { scope: 'row' }, [h('code', { text: s.key })]),
    h('td', { class: 'plain', text: s.english }),
    h('td', { class: 'plain', text: s.file == null ? '—' : typeof s.file === 'string' ? s.file : JSON.stringify(s.file) }),
    h('td', { class: 'plain console-words', text: shown(s) || '—' }),
  ]));
  const out = [h('p', {}, [`${siteName(v.site)}: language ${v.locale === 'auto' ? 'follows the visitor’s browser' : v.locale}.`])];
  if (isAdmin()) out.push(editor(v, reload));
  out.push(table('strings-table', `Widget words of ${siteName(v.site)}`, ['Key', 'English', 'Config file', 'Console'], h('tbody', {}, rows)));
  return out;
}

function editor(v, reload) {
  const id = 'strings-' + idPart(v.site);
  const key = select(id + '-key', v.strings.map((s) => [s.key, `${s.key} — ${s.english}`]), v.strings[0]?.key);
  const language = select(id + '-language', [['*', 'All languages'], ...v.languages.map((l) => [l, l])], '*');
  const text = h('input', { id: id + '-text', type: 'text', maxlength: '500', required: '' });
  const status = h('p', { class: 'tool-status', role: 'status' });
  const errors = h('div', { class: 'errors' });
  const path = () => '/sites/' + enc(v.site) + '/strings/' + enc(key.value);
  async function run(method, body, done) {
    errors.replaceChildren(); status.textContent = '';
    try {
      await api(method, path(), body);
      announce(done); status.textContent = done;
      await reload();
    } catch (e) { errors.replaceChildren(errorText(e)); }
  }
  const save = h('button', { type: 'submit', text: 'Save' });
  const reset = h('button', { type: 'button', class: 'secondary', text: 'Reset to the file', onclick: () => run('DELETE', undefined, 'Reset.') });
  const form = h('form', { class: 'tool-form', 'aria-label': 'Change a string' }, [
    field('String', key), field('Language', language), field('Words', text), h('div', { class: 'actions' }, [save, reset]), status, errors,
  ]);
  form.addEventListener('submit', (e) => { e.preventDefault(); run('PUT', { language: language.value, text: text.value }, 'Saved.'); });
  return form;
}
