// The Usage page: per site and day, tokens against the daily budget and turns
// and calls, drawn with uPlot (a classic script, global `uPlot`) and repeated in
// a table, since a chart alone is no use to a screen reader. The charts follow
// their box's width and are removed with the page, so nothing keeps observing
// elements that are gone.

import { h, view, pageTitle, field, select, table, errorText, idPart, num, qs } from './dom.js';
import { api } from './api.js';
import { siteName, siteOptions } from './state.js';

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

export function pageUsage(ctx) {
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
    ...['turns', 'input_tokens', 'output_tokens', 'spent', 'confirmed', 'cancelled', 'expired', 'auto_calls', 'failures', 'helpful', 'not_helpful'].map((k) => h('td', { class: 'num', text: num(d[k]) })),
    h('td', { class: 'num', text: satisfaction(d) }),
  ]));
  list.append(h('section', { class: 'site-block usage', 'data-site': s.site, 'aria-labelledby': 'usage-' + key }, [
    h('h2', { id: 'usage-' + key, text: name }),
    h('p', {}, [budget ? `Daily token budget: ${num(budget)} tokens.` : 'No daily token budget.']),
    h('div', { class: 'charts' }, [tokens.block, activity.block]),
    table('usage-table-' + key, `${name}: usage per day (UTC)`,
      ['Day', 'Turns', 'Input tokens', 'Output tokens', 'Spent', 'Confirmed', 'Cancelled', 'Expired', 'Auto calls', 'Failures', 'Rated helpful', 'Rated not helpful', 'Satisfaction'],
      h('tbody', {}, rows)),
  ]));
  // uPlot measures its box, so the charts are drawn once they are in the page.
  const xs = s.days.map((d) => Date.parse(d.day + 'T00:00:00Z') / 1000);
  const values = (series) => series.map((x) => x.values || s.days.map((d) => d[x.key] ?? 0));
  charts.push(drawChart(tokens.box, xs, tokenSeries, values(tokenSeries)));
  charts.push(drawChart(activity.box, xs, ACTIVITY_SERIES, values(ACTIVITY_SERIES)));
}

/** The share of the day's rated answers rated helpful, or a dash. */
function satisfaction(d) {
  const rated = (d.helpful || 0) + (d.not_helpful || 0);
  return rated ? `${Math.round((100 * d.helpful) / rated)} %` : '—';
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

/** An axis number kept short (1.5M, 750k, 42) so token counts fit beside the chart. */
function compact(n) {
  const short = (x) => String(Number(x.toFixed(3)));
  const abs = Math.abs(n);
  if (abs >= 1e9) return short(n / 1e9) + 'B';
  if (abs >= 1e6) return short(n / 1e6) + 'M';
  if (abs >= 1e3) return short(n / 1e3) + 'k';
  return short(n);
}

/**
 * The y axis's width from its widest label, so no label is ever cut off
 * whatever the numbers are. uPlot calls this on each layout pass; from the
 * third pass on it keeps the last size so the layout settles.
 */
function axisSize(u, labels, axisIdx, cycleNum) {
  const axis = u.axes[axisIdx];
  if (cycleNum > 1 && axis._size) return axis._size;
  let size = (axis.ticks?.show === false ? 0 : axis.ticks?.size ?? 10) + (axis.gap ?? 5);
  if (labels?.length) {
    const ctx = u.ctx;
    const prev = ctx.font;
    ctx.font = Array.isArray(axis.font) ? axis.font[0] : axis.font;
    const ratio = window.uPlot?.pxRatio || window.devicePixelRatio || 1;
    size += Math.max(...labels.map((l) => ctx.measureText(String(l ?? '')).width)) / ratio;
    ctx.font = prev;
  }
  return Math.max(48, Math.ceil(size) + 4);
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
    axes: [axis, { ...axis, values: (u, splits) => splits.map((v) => (v == null ? '' : compact(v))), size: axisSize }],
    series: [{}, ...series.map((x) => ({ label: x.label, stroke: x.color, width: 2, dash: x.dash, points: { show: true, size: 5 } }))],
  }, [xs, ...data], box);
  // Follow the box's width (window resize, phone rotation) without a page reload.
  const ro = new ResizeObserver(() => { const w = width(); if (w !== plot.width) plot.setSize({ width: w, height: 220 }); });
  ro.observe(box);
  return () => { ro.disconnect(); plot.destroy(); };
}
