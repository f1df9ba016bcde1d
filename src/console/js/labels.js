// The words the console shows for the API's codes (policies, statuses, audit
// events, step states). They live in one place so every page names a thing the
// same way, and so a new code needs one edit.

export const POLICY = { off: 'Off', auto: 'Runs automatically', confirm: 'Needs confirmation' };
// Every policy's name, the teammate policies (SPEC §20) included; the Tools page
// offers each of them as a choice, and every page names a policy with this map.
export const POLICY_NAME = { ...POLICY, approve: 'Needs a teammate’s approval', 'confirm+approve': 'Needs confirmation and a teammate’s approval' };
export const STATUS = { answered: 'Answered', awaiting_confirmation: 'Awaiting confirmation', failed: 'Failed', streaming: 'Streaming', sent: 'Sent' };
export const EVENTS = ['requested', 'confirmed', 'cancelled', 'expired', 'executed', 'failed', 'refused', 'tool_changed'];
export const EVENT_LABEL = { requested: 'Requested', confirmed: 'Confirmed', cancelled: 'Cancelled', expired: 'Expired', executed: 'Executed', failed: 'Failed', refused: 'Refused', tool_changed: 'Tool changed' };
// Step lines read as in the widget: a mark (hidden from screen readers) and a word.
export const STEP = {
  running: ['…', '', 'Running…'], succeeded: ['✓', 'ok', 'Succeeded'], failed: ['✗', 'bad', 'Failed'],
  refused: ['✗', 'bad', 'Refused'], confirmed: ['✓', 'ok', 'Confirmed'], cancelled: ['', '', 'Cancelled'],
  expired: ['', '', 'Expired'], pending: ['', '', 'Waiting for the visitor'],
  awaiting_approval: ['', '', 'Waiting for a teammate'],
};
