// The words the console shows for the API's codes (policies, statuses, audit
// events, step states). They live in one place so every page names a thing the
// same way, and so a new code needs one edit.

export const POLICY = { off: 'Off', auto: 'Runs automatically', confirm: 'Needs confirmation' };
export const STATUS = { answered: 'Answered', awaiting_confirmation: 'Awaiting confirmation', failed: 'Failed', streaming: 'Streaming', sent: 'Sent' };
export const EVENTS = ['requested', 'confirmed', 'cancelled', 'expired', 'executed', 'failed', 'refused', 'tool_changed'];
export const EVENT_LABEL = { requested: 'Requested', confirmed: 'Confirmed', cancelled: 'Cancelled', expired: 'Expired', executed: 'Executed', failed: 'Failed', refused: 'Refused', tool_changed: 'Tool changed' };
// Step lines read as in the widget: a mark (hidden from screen readers) and a word.
export const STEP = {
  running: ['…', '', 'Running…'], succeeded: ['✓', 'ok', 'Succeeded'], failed: ['✗', 'bad', 'Failed'],
  refused: ['✗', 'bad', 'Refused'], confirmed: ['✓', 'ok', 'Confirmed'], cancelled: ['', '', 'Cancelled'],
  expired: ['', '', 'Expired'], pending: ['', '', 'Waiting for the visitor'],
};
