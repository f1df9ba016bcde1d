//! Edits before confirming (SPEC §20). An answer `{"decision": "confirm",
//! "edits": {...}}` to a verified card is checked — only the tool's editable
//! fields, plain values, no invisible characters, I-JSON, the schema — and
//! never runs: the server signs a new card for the edited call, the old card
//! closes `superseded`, and only the new card can be confirmed. What runs is
//! what the last card showed, and the audit keeps both argument sets (the old
//! card's rows and the new card's `requested` row).

use super::Verified;
use super::card::Face;
use crate::app::App;
use crate::error::ApiError;
use crate::ids::new_id;
use crate::llm::ChatMessage;
use crate::states::{CallStatus, Reason};
use crate::store::stored::{decode_transcript, encode_transcript};
use crate::store::{CallRow, Decided};
use crate::tools::arguments::Arguments;
use crate::tools::editable;
use crate::wire::StreamEvent;

/// Signs and stores the card for `edits` to the verified card, which it
/// replaces, and returns the `confirm` event that shows it. An answer with
/// edits never runs, even when they change nothing:
/// the visitor confirms the card that shows them.
pub async fn resign(app: &App, verified: &Verified, edits: &str) -> Result<StreamEvent, ApiError> {
    let Verified { call, tool } = verified;
    let current: serde_json::Value = serde_json::from_str(&call.arguments)
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("stored arguments: {e}")))?;
    // The edits as the visitor sent them: I-JSON checked on their own text.
    let checked = Arguments::from_model(edits).and_then(|a| match a.value {
        serde_json::Value::Object(map) => Ok(map),
        _ => Err("edits must be an object of field names and values".to_string()),
    });
    let applied = checked.and_then(|edits| editable::apply(tool, &current, &edits));
    let arguments = match applied {
        Ok(arguments) => arguments,
        Err(why) => {
            super::refuse(app, call, Reason::InvalidArguments).await?;
            return Err(ApiError::InvalidEdit(why));
        }
    };
    let now = app.clock.now_ms();
    let (new, face) = edited_card(app, call, tool, &arguments, now)?;
    let replaced = app.store.cards().replace_edited(call, &new, now).await?;
    if replaced != Decided::Won {
        return Err(super::decide::refused(app, call, replaced, now, None).await?);
    }
    app.live
        .publish(&new.site, &new.conversation, "card_raised");
    Ok(super::card::event(&new, face))
}

/// The new card: the old one's call with the edited arguments, lines rendered
/// from them, a fresh expiry and id, the model's transcript saying the values
/// that will run, and a new signature over all of it.
fn edited_card(
    app: &App,
    old: &CallRow,
    tool: &crate::tools::Tool,
    arguments: &Arguments,
    now: i64,
) -> Result<(CallRow, Face), ApiError> {
    let mut new = old.clone();
    new.id = new_id("call");
    new.arguments = arguments.canonical.clone();
    let face = super::card::face(&mut new, tool, arguments)?;
    new.status = CallStatus::Pending;
    new.expires_at = Some(now + app.config.approval_ttl.as_millis() as i64);
    new.created_at = now;
    new.decided_at = None;
    new.reason = None;
    new.edited_from = Some(old.id.clone());
    new.rule = tool.gate(&arguments.value).1;
    let transcript =
        decode_transcript(old.context.as_deref().unwrap_or("[]")).map_err(anyhow::Error::from)?;
    new.context = Some(encode_transcript(&with_arguments(
        transcript,
        &old.model_call_id,
        &arguments.canonical,
    )));
    new.signature = Some(super::sign::sign(&app.keys.confirmations, &new));
    Ok((new, face))
}

/// The transcript with the model's call `id` carrying `canonical` as its
/// arguments: the model's history holds the values that run.
fn with_arguments(mut transcript: Vec<ChatMessage>, id: &str, canonical: &str) -> Vec<ChatMessage> {
    for message in transcript.iter_mut().rev() {
        if let ChatMessage::Assistant { tool_calls, .. } = message
            && let Some(call) = tool_calls.iter_mut().find(|c| c.id == id)
        {
            call.arguments = canonical.to_string();
            break;
        }
    }
    transcript
}
