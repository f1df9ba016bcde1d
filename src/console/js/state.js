// Who is signed in and which sites they see. Every page reads this, and the API
// client needs its CSRF token, so it is one shared object rather than something
// passed through each call.

export const state = { operator: null, csrf: null, sites: [], events: null, eventsOpened: false, listeners: new Set() };

export const siteName = (id) => (state.sites.find((s) => s.id === id) || {}).name || id;
export const isAdmin = () => state.operator?.role === 'admin';
/** `[value, text]` pairs for a site `select`, with "All sites" first when `any`. */
export const siteOptions = (any) => (any ? [['', 'All sites']] : []).concat(state.sites.map((s) => [s.id, s.name || s.id]));
