// Live changes from the server's event stream. Pages subscribe only while they
// are on screen, so a page that has been left never redraws itself, and a
// reconnect makes every page refresh in case changes were missed meanwhile.

import { API } from './api.js';
import { state } from './state.js';

export function openEvents() {
  closeEvents();
  if (!window.EventSource) return;
  const es = new EventSource(API + '/events');
  es.addEventListener('conversation', (ev) => {
    let d; try { d = JSON.parse(ev.data); } catch { return; }
    for (const fn of state.listeners) fn(d);
  });
  // After a reconnect some changes may have been missed: pages refresh as for any change.
  es.addEventListener('open', () => {
    if (state.eventsOpened) for (const fn of state.listeners) fn(null);
    state.eventsOpened = true;
  });
  state.events = es;
}

export function closeEvents() {
  state.events?.close();
  state.events = null; state.eventsOpened = false;
}

/** Calls `fn(change)` on every live change while the page `ctx` is shown; `null` means "maybe missed some". */
export function onLive(ctx, fn) {
  state.listeners.add(fn);
  ctx.cleanups.push(() => state.listeners.delete(fn));
}

/** `fn` run once `ms` after the last call, and never after the page `ctx` is left. */
export function debounced(ctx, fn, ms) {
  let timer = null;
  ctx.cleanups.push(() => clearTimeout(timer));
  return () => { clearTimeout(timer); timer = setTimeout(fn, ms); };
}
