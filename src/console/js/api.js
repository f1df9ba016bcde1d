// The one way the console talks to the operator API (docs/operator-api.md).
// Keeping fetch, the CSRF header and error shapes here means every page fails
// the same way, and a session that has ended is noticed by whichever call sees
// it first.

import { state } from './state.js';

export const API = '/v1/operator';

export class ApiError extends Error {
  constructor(status, code, message, retryAfter) {
    super(message);
    this.status = status; this.code = code; this.retryAfter = retryAfter;
  }
}

// Set by main.js; a hook rather than an import keeps this module free of the page code.
let sessionGone = () => {};
/** Registers what to do when a call finds the session gone (expired, revoked). */
export function onSessionGone(fn) { sessionGone = fn; }

export async function api(method, path, body, headers = {}) {
  const init = { method, credentials: 'same-origin', headers: { accept: 'application/json', ...headers } };
  if (body !== undefined) { init.headers['content-type'] = 'application/json'; init.body = JSON.stringify(body); }
  if (method !== 'GET' && state.csrf) init.headers['x-deskbell-csrf'] = state.csrf;
  let r;
  try { r = await fetch(API + path, init); } catch (e) {
    throw new ApiError(0, 'network', 'The server could not be reached. Check your connection and try again.');
  }
  if (r.status === 204) return null;
  const j = await r.json().catch(() => null);
  if (!r.ok) {
    const code = j?.error?.code || 'http_' + r.status;
    const err = new ApiError(r.status, code, j?.error?.message || `The server answered ${r.status}.`, r.headers.get('retry-after'));
    // Any call finding the session gone (expired, revoked) returns to the sign-in form.
    if (code === 'operator_unauthenticated' && path !== '/session') sessionGone();
    throw err;
  }
  return j;
}
