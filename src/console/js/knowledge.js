// The Knowledge page: what each site's retrieval index holds, the last ingest
// report, a re-ingest button for admins, and a search that shows exactly the
// passages a turn would give the model, so an operator can see why an answer
// cited what it did.

import { h, view, pageTitle, field, errorText, timeEl, enc, idPart, num, qs } from './dom.js';
import { api } from './api.js';
import { siteName, isAdmin } from './state.js';
import { safeUrl, link } from './markdown.js';

export function pageKnowledge(ctx) {
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
    const bar = h('progress', { class: 'ingest-progress', 'aria-label': 'Ingest progress of ' + siteName(k.site), hidden: '' });
    const button = h('button', { type: 'button', class: 'ingest', text: 'Re-ingest' });
    button.addEventListener('click', async () => {
      button.disabled = true; status.className = 'ingest-status'; status.textContent = 'Ingesting… this can take a while.';
      bar.hidden = false; bar.removeAttribute('value');
      try {
        // The ingest runs as a job on the server (a closed tab does not stop
        // it); its progress is polled until it ends.
        let job = await api('POST', `/knowledge/${enc(k.site)}/ingest`, undefined, { prefer: 'respond-async' });
        while (job.state === 'running') {
          await new Promise((done) => setTimeout(done, 500));
          if (!ctx.alive) return;
          job = await api('GET', `/knowledge/${enc(k.site)}/ingest/${enc(job.job)}`);
          showProgress(bar, status, job);
        }
        if (!ctx.alive) return;
        if (job.state !== 'finished') throw new Error(`The ingest failed: ${job.error || 'no reason given'}.`);
        const r = job.report;
        report.replaceChildren(...reportView(r));
        status.textContent = `Ingest finished: ${r.added} added, ${r.updated} updated, ${r.removed} removed, ${r.skipped?.length || 0} skipped.`;
      } catch (e) {
        status.className = 'ingest-status error-text'; status.textContent = e.message;
      } finally { button.disabled = false; bar.hidden = true; }
    });
    section.append(h('div', { class: 'actions' }, [button]), bar, status);
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
      h('p', { class: 'muted small', 'data-found-by': (p.found_by || []).join(' '), text: `${foundBy(p)} · score ${Number(p.score).toFixed(3)}` }),
    ]);
  }));
}

/** Which searches found a passage, with its rank in each (SPEC §21). */
function foundBy(p) {
  const parts = [];
  if (p.bm25_rank) parts.push(`keywords (BM25) #${p.bm25_rank}`);
  if (p.dense_rank) parts.push(`meaning (embeddings) #${p.dense_rank}`);
  return parts.length ? `Found by ${parts.join(' and ')}` : 'Found';
}

/** A running job's counts on the bar (indeterminate until something is found). */
function showProgress(bar, status, job) {
  if (job.found > 0) { bar.max = job.found; bar.value = job.read; } else bar.removeAttribute('value');
  if (job.state === 'running') status.textContent = `Ingesting… ${job.read} of ${job.found} pages and files read so far.`;
}
