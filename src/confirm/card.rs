//! Raising a card (SPEC §6.4, §7): the call is stored as pending with its
//! canonical arguments, the argument lines the visitor reads (rendered from those
//! very arguments), its tool's configuration digest, its expiry, the model
//! transcript to resume from, and a signature over all of it; then the card event
//! is what the visitor is shown. A tool with a quota counts the card's use in
//! the same transaction, or refuses it before any card is shown (SPEC §20).

use crate::app::App;
use crate::clock::rfc3339;
use crate::llm::ChatMessage;
use crate::states::{AuditEvent, CallStatus, Policy};
use crate::store::stored::{encode_lines, encode_transcript};
use crate::store::{AuditRow, CallRow};
use crate::tools::arguments::Arguments;
use crate::tools::{Tool, editable, render};
use crate::wire::{ArgLine, EditableField, QuotaNote, StreamEvent};

/// Stores `row` (a new call of `tool`, status pending, with its canonical
/// arguments) as a card and returns the `confirm` event that shows it; `None`
/// when the tool's quota is spent (nothing was stored).
pub async fn raise(
    app: &App,
    mut row: CallRow,
    tool: &Tool,
    arguments: &Arguments,
    transcript: &[ChatMessage],
) -> anyhow::Result<Option<StreamEvent>> {
    let now = app.clock.now_ms();
    // A call only a teammate approves shows the visitor no card: it goes
    // straight to the approvals queue, signed with the approvals' key.
    let teammate_only = tool.policy == Policy::Approve;
    let ttl = match teammate_only {
        true => tool.approval_ttl,
        false => app.config.approval_ttl,
    };
    let expires_at = now + ttl.as_millis() as i64;
    if teammate_only {
        row.status = CallStatus::AwaitingApproval;
    }
    let face = face(&mut row, tool, arguments)?;
    row.config_digest = Some(tool.digest.clone());
    row.expires_at = Some(expires_at);
    // The system prompt is rebuilt for the continuation, so it is not stored.
    row.context = Some(encode_transcript(transcript));
    let key = match teammate_only {
        true => &app.keys.approvals,
        false => &app.keys.confirmations,
    };
    row.signature = Some(super::sign::sign(key, &row));
    let Some(row) = store(app, row, tool, now).await? else {
        return Ok(None);
    };
    app.live
        .publish(&row.site, &row.conversation, "card_raised");
    if teammate_only {
        super::approval::requested(app, &row);
        return Ok(Some(StreamEvent::Step {
            call: row.id.clone(),
            tool: row.tool.clone(),
            label: row.label.clone(),
            status: CallStatus::AwaitingApproval,
        }));
    }
    Ok(Some(event(&row, face)))
}

/// What a card shows of its call, rendered from the arguments that will run.
pub struct Face {
    pub lines: Vec<ArgLine>,
    pub editable: Vec<EditableField>,
}

/// Renders the card's lines and editable fields from `arguments` and writes
/// them onto `row`, which stores and signs them.
pub fn face(row: &mut CallRow, tool: &Tool, arguments: &Arguments) -> anyhow::Result<Face> {
    let lines = render::render(&tool.schema, &arguments.value);
    let editable = editable::fields(tool, &arguments.value);
    row.lines = Some(encode_lines(&lines));
    row.editable = match editable.is_empty() {
        true => None,
        false => Some(serde_json::to_string(&editable)?),
    };
    Ok(Face { lines, editable })
}

/// Stores a signed card with its `requested` row, counting its quota use when
/// its tool has a quota: `None` when that quota is spent.
pub async fn store(
    app: &App,
    mut row: CallRow,
    tool: &Tool,
    now: i64,
) -> anyhow::Result<Option<CallRow>> {
    let requested = AuditRow::for_call(&row, AuditEvent::Requested, None, now);
    let Some(quota) = &tool.quota else {
        app.store.calls().insert(&row, &[requested]).await?;
        return Ok(Some(row));
    };
    if row.quota.is_none() {
        row.quota = Some(super::quota::use_of(quota, &row.visitor, now));
    }
    let window = super::quota::window_name(quota.window);
    Ok(app
        .store
        .calls()
        .insert_counted(&row, &[requested], quota.max, window)
        .await?)
}

/// The `confirm` event of a stored card, with what it shows.
pub fn event(row: &CallRow, face: Face) -> StreamEvent {
    StreamEvent::Confirm {
        call: row.id.clone(),
        tool: row.tool.clone(),
        label: row.label.clone(),
        arguments: face.lines,
        expires_at: rfc3339(row.expires_at.unwrap_or_default()),
        signature: row.signature.clone().unwrap_or_default(),
        editable: face.editable,
        quota: quota_of(row),
    }
}

/// The editable fields a card was shown with.
pub fn editable_of(row: &CallRow) -> Vec<EditableField> {
    row.editable
        .as_deref()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default()
}

/// What a card showed of its tool's quota.
pub fn quota_of(row: &CallRow) -> Option<QuotaNote> {
    let note = row.quota.as_ref()?.note.as_deref()?;
    serde_json::from_str(note).ok()
}
