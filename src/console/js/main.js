// Deskbell operator console: one page over the operator API (docs/operator-api.md),
// as native modules with no build step. This entry owns what outlives any one
// page: signing in and out, the live event stream, and the hash routing that
// picks which page module draws into #view. Pages get a context `{ alive,
// cleanups }` so work finishing after the operator has moved on is dropped.

import { api, onSessionGone } from './api.js';
import { state } from './state.js';
import { view, announce } from './dom.js';
import { openEvents, closeEvents } from './live.js';
import { pageConversations } from './conversations.js';
import { pageConversation } from './conversation.js';
import { pageAudit } from './audit.js';
import { pageTools } from './tools.js';
import { pageKnowledge } from './knowledge.js';
import { pageUsage } from './usage.js';
import { pageStrings } from './strings.js';
import { pageQueue, startQueueWatch } from './desk.js';
import { pageApprovals, startApprovalsWatch } from './approvals.js';

let current = null; // The page on screen: { alive, cleanups }.
let stopWatches = null; // Ends the queue's and approvals' badge watches at sign-out.

// ---- signing in and out ---------------------------------------------------------------

function showSignIn(message) {
  closeEvents();
  if (stopWatches) { stopWatches(); stopWatches = null; }
  leavePage();
  state.operator = null; state.csrf = null;
  document.body.removeAttribute('data-role');
  document.getElementById('top').hidden = true;
  view.hidden = true; view.replaceChildren();
  document.getElementById('signin').hidden = false;
  document.getElementById('signin-error').textContent = message || '';
  document.title = 'Sign in · Deskbell console';
}

function sessionEnded() {
  if (!state.operator) return;
  showSignIn('Your session has ended. Please sign in again.');
  document.getElementById('signin-email').focus();
}

function signInMessage(e) {
  if (e.code === 'login_failed') return 'The email or password is wrong. Check them and try again.';
  if (e.code === 'rate_limited') {
    const s = Number(e.retryAfter);
    const wait = s > 0 ? `in ${Math.ceil(s / 60)} minute${Math.ceil(s / 60) === 1 ? '' : 's'}` : 'later';
    return `Too many failed sign-ins. Please try again ${wait}.`;
  }
  return e.message;
}

async function onSignIn(ev) {
  ev.preventDefault();
  const email = document.getElementById('signin-email');
  const password = document.getElementById('signin-password');
  const error = document.getElementById('signin-error');
  const button = document.getElementById('signin-submit');
  error.textContent = '';
  if (!email.value.trim() || !password.value) {
    error.textContent = 'Enter your email and password.';
    (email.value.trim() ? password : email).focus();
    return;
  }
  button.disabled = true;
  try {
    const session = await api('POST', '/session', { email: email.value.trim(), password: password.value });
    password.value = '';
    await signedIn(session, true);
  } catch (e) {
    error.textContent = signInMessage(e);
    password.select();
  } finally {
    button.disabled = false;
  }
}

async function signedIn(session, moveFocus) {
  state.operator = session.operator;
  state.csrf = session.csrf;
  document.body.dataset.role = session.operator.role;
  document.getElementById('whoami').textContent = `${session.operator.email} (${session.operator.role})`;
  document.getElementById('signin').hidden = true;
  document.getElementById('signin-error').textContent = '';
  document.getElementById('top').hidden = false;
  view.hidden = false;
  try { state.sites = (await api('GET', '/sites')).items; } catch { state.sites = []; }
  if (!state.operator) return; // The session ended while the sites loaded.
  openEvents();
  if (!stopWatches) {
    const watches = [startQueueWatch(state.listeners), startApprovalsWatch(state.listeners)];
    stopWatches = () => watches.forEach((stop) => stop());
  }
  // A hash that is not a page (an old #main) would leave the view empty: start on the list.
  if (!location.hash.startsWith('#/')) history.replaceState(null, '', '#/conversations');
  route(moveFocus);
}

async function signOut() {
  await api('DELETE', '/session').catch(() => {});
  showSignIn('');
  announce('You are signed out.');
  document.getElementById('signin-email').focus();
}

// ---- routing ----------------------------------------------------------------------

const ROUTES = [
  [/^#\/queue\/?$/, 'queue', pageQueue],
  [/^#\/approvals\/?$/, 'approvals', pageApprovals],
  [/^#\/conversations\/?$/, 'conversations', pageConversations],
  [/^#\/conversations\/([^/]+)$/, 'conversations', pageConversation],
  [/^#\/audit\/?$/, 'audit', pageAudit],
  [/^#\/tools\/?$/, 'tools', pageTools],
  [/^#\/knowledge\/?$/, 'knowledge', pageKnowledge],
  [/^#\/usage\/?$/, 'usage', pageUsage],
  [/^#\/strings\/?$/, 'strings', pageStrings],
];

function leavePage() {
  if (!current) return;
  current.alive = false;
  for (const fn of current.cleanups) { try { fn(); } catch { /* a failed cleanup must not block the next page */ } }
  current = null;
}

function route(moveFocus) {
  if (!state.operator) return;
  // Hashes that are not pages (the skip link's #main) leave the page as it is.
  if (location.hash && !location.hash.startsWith('#/')) return;
  let match = null;
  for (const [re, nav, fn] of ROUTES) {
    const m = re.exec(location.hash);
    if (m) {
      // A hand-typed hash with a broken escape goes to the list, not to a blank page.
      try { match = { nav, fn, args: m.slice(1).map(decodeURIComponent) }; } catch { match = null; }
      break;
    }
  }
  if (!match) {
    history.replaceState(null, '', '#/conversations');
    match = { nav: 'conversations', fn: pageConversations, args: [] };
  }
  leavePage();
  current = { alive: true, cleanups: [] };
  view.replaceChildren();
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.dataset.nav === match.nav) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  match.fn(current, ...match.args);
  if (moveFocus) view.querySelector('h1')?.focus();
}

// ---- start ----------------------------------------------------------------------------

function start() {
  onSessionGone(sessionEnded);
  document.getElementById('signin-form').addEventListener('submit', onSignIn);
  document.getElementById('signout').addEventListener('click', signOut);
  // The skip link moves focus without touching the hash, which holds the page.
  document.getElementById('skip').addEventListener('click', (e) => {
    e.preventDefault();
    const main = document.getElementById('main');
    (main.querySelector('section:not([hidden]) h1, #view:not([hidden]) h1') || main).focus();
  });
  window.addEventListener('hashchange', () => route(true));
  api('GET', '/session').then(
    (s) => signedIn(s, false),
    (e) => showSignIn(e.code === 'operator_unauthenticated' ? '' : e.message),
  );
}

start();
