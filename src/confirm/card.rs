//! Raising a card (SPEC §6.4, §7): the call is stored as pending with its
//! canonical arguments, the argument lines the visitor reads (rendered from those
//! very arguments), its tool's configuration digest, its expiry, the model
//! transcript to resume from, and a signature over all of it; then the card event
//! is what the visitor is shown.

use crate::app::App;
use crate::clock::rfc3339;
use crate::llm::ChatMessage;
use crate::states::AuditEvent;
use crate::store::stored::{encode_lines, encode_transcript};
use crate::store::{AuditRow, CallRow};
use crate::tools::arguments::Arguments;
use crate::tools::{Tool, render};
use crate::wire::StreamEvent;

/// Stores `row` (a new call of `tool`, status pending, with its canonical
/// arguments) as a card and returns the `confirm` event that shows it.
pub async fn raise(
    app: &App,
    mut row: CallRow,
    tool: &Tool,
    arguments: &Arguments,
    transcript: &[ChatMessage],
) -> anyhow::Result<StreamEvent> {
    let lines = render::render(&tool.schema, &arguments.value);
    let now = app.clock.now_ms();
    let expires_at = now + app.config.approval_ttl.as_millis() as i64;
    row.lines = Some(encode_lines(&lines));
    row.config_digest = Some(tool.digest.clone());
    row.expires_at = Some(expires_at);
    // The system prompt is rebuilt for the continuation, so it is not stored.
    row.context = Some(encode_transcript(transcript));
    let signature = super::sign::sign(&app.keys.confirmations, &row);
    row.signature = Some(signature.clone());
    let requested = AuditRow::for_call(&row, AuditEvent::Requested, None, now);
    app.store.calls().insert(&row, &[requested]).await?;
    app.live
        .publish(&row.site, &row.conversation, "card_raised");
    Ok(StreamEvent::Confirm {
        call: row.id.clone(),
        tool: tool.name.clone(),
        label: tool.label.clone(),
        arguments: lines,
        expires_at: rfc3339(expires_at),
        signature,
    })
}
