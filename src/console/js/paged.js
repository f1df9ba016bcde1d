// Lists the API pages with `next_cursor` (conversations, audit rows). Live
// updates re-read only the first page and merge it in, so new rows appear
// without throwing away what the operator has already paged to.

import { api } from './api.js';
import { emptyRow, qs } from './dom.js';

/**
 * A table filled page by page from `path` (newest first, `next_cursor`). `refresh`
 * re-reads the first page and keeps any further pages already shown, so a live
 * update never throws away what the operator paged to.
 */
export function pagedList(ctx, { path, params, tbody, row, cols, empty, more, key, onError }) {
  let items = [], cursor = null, pages = 0, seq = 0;
  function render() {
    tbody.replaceChildren(...(items.length ? items.map(row) : [emptyRow(cols, empty)]));
    more.hidden = !cursor;
  }
  async function load(reset) {
    const mine = ++seq;
    more.disabled = true;
    try {
      const page = await api('GET', path + qs({ ...params(), cursor: reset ? '' : cursor }));
      if (mine !== seq || !ctx.alive) return;
      items = reset ? page.items : items.concat(page.items);
      cursor = page.next_cursor || null;
      pages = reset ? 1 : pages + 1;
      render();
      onError(null);
    } catch (e) {
      if (mine === seq && ctx.alive) onError(e);
    } finally {
      more.disabled = false;
    }
  }
  /** Re-reads the first page; returns how many rows are new. */
  async function refresh() {
    const mine = ++seq;
    try {
      const page = await api('GET', path + qs(params()));
      if (mine !== seq || !ctx.alive) return 0;
      const known = new Set(items.map(key));
      const fresh = page.items.filter((i) => !known.has(key(i))).length;
      if (pages <= 1) { items = page.items; cursor = page.next_cursor || null; pages = 1; }
      else { const first = new Set(page.items.map(key)); items = page.items.concat(items.filter((i) => !first.has(key(i)))); }
      render();
      return fresh;
    } catch (e) {
      if (mine === seq && ctx.alive) onError(e);
      return 0;
    }
  }
  more.addEventListener('click', async () => {
    const count = items.length;
    await load(false);
    // When the button goes away, focus stays in the table, on the first new row.
    if (more.hidden && ctx.alive) (tbody.rows[count]?.querySelector('a') || tbody.closest('.table-wrap')).focus();
  });
  return { load, refresh };
}
