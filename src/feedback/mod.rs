//! Visitors' ratings of answers (issue 41): `POST /v1/conversations/{id}/
//! messages/{message}/feedback` with `{"rating": "up"|"down", "comment": …}`,
//! guarded like history (the conversation must be the caller's; another
//! visitor's looks missing). Rating an answer again replaces the rating. The
//! rating comes back in history (so a reload shows the pressed thumb), in the
//! console beside the answer, in usage as satisfaction per day, in the export
//! beside the audit's (`operator/feedback.rs`), and in `deskbell_feedback_total`.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};

use crate::app::App;
use crate::clock::rfc3339;
use crate::error::{ApiError, RawBody};
use crate::guard;
use crate::ids::ConversationId;
use crate::states::Role;
use crate::store::FeedbackRow;
use crate::wire::{FeedbackRequest, FeedbackView, Rating};

/// The longest comment a visitor may leave, in characters.
pub const MAX_COMMENT_CHARS: usize = 1000;

pub fn router() -> Router<App> {
    Router::new().route(
        "/v1/conversations/{id}/messages/{message}/feedback",
        post(rate),
    )
}

async fn rate(
    State(app): State<App>,
    peer: guard::Peer,
    headers: HeaderMap,
    Path((id, message)): Path<(String, String)>,
    RawBody(body): RawBody,
) -> Result<Json<FeedbackView>, ApiError> {
    let caller = guard::admit(&app, &headers, peer, guard::Door::Read).await?;
    let id = match ConversationId::parse(&id) {
        Some(id) if guard::owns(&app, &caller, &id).await? => id.as_str().to_string(),
        _ => return Err(ApiError::ConversationNotFound),
    };
    let request: FeedbackRequest =
        serde_json::from_slice(&body).map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
    let comment = checked_comment(request.comment)?;
    // Only the assistant's answers are rated; a visitor's own message, an
    // operator's reply or a message of another conversation is not there.
    let messages = app.store.conversations().messages(&id).await?;
    let Some(answer) = messages
        .iter()
        .find(|m| m.id == message && m.role == Role::Assistant)
    else {
        return Err(ApiError::Missing("message"));
    };
    let now = app.clock.now_ms();
    let stored = app
        .store
        .feedback()
        .put(&FeedbackRow {
            message: answer.id.clone(),
            conversation: id,
            site: caller.site.config.id.clone(),
            rating: request.rating.as_str().to_string(),
            comment,
            created_at: now,
            updated_at: now,
        })
        .await?;
    crate::ops::metrics::feedback(&caller.site.config.id, request.rating.as_str());
    Ok(Json(view(&stored)))
}

/// A comment as kept: trimmed, empty as none, bounded, and without the
/// control characters that could hide text in the console (newlines stay).
fn checked_comment(comment: Option<String>) -> Result<Option<String>, ApiError> {
    let Some(comment) = comment else {
        return Ok(None);
    };
    let comment = comment.trim();
    if comment.chars().count() > MAX_COMMENT_CHARS {
        return Err(ApiError::InvalidRequest(format!(
            "comment: must be at most {MAX_COMMENT_CHARS} characters"
        )));
    }
    if comment.chars().any(hidden) {
        return Err(ApiError::InvalidRequest(
            "comment: must not hold control, direction or invisible characters".into(),
        ));
    }
    Ok((!comment.is_empty()).then(|| comment.to_string()))
}

/// Characters that would hide or reorder text where the comment is shown:
/// controls (but newline and tab), direction marks, embeddings and isolates,
/// and invisible spaces. Joiners stay: emoji sequences need them.
fn hidden(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{200B}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
}

/// A stored rating as history and the console show it.
pub fn view(row: &FeedbackRow) -> FeedbackView {
    FeedbackView {
        rating: Rating::parse(&row.rating),
        comment: row.comment.clone(),
        created_at: rfc3339(row.created_at),
        updated_at: rfc3339(row.updated_at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comment_is_trimmed_bounded_and_free_of_control_characters() {
        assert_eq!(checked_comment(None).unwrap(), None);
        assert_eq!(checked_comment(Some("  ".into())).unwrap(), None);
        assert_eq!(
            checked_comment(Some(" Too slow.\nBut right. ".into())).unwrap(),
            Some("Too slow.\nBut right.".into())
        );
        assert!(checked_comment(Some("x".repeat(MAX_COMMENT_CHARS + 1))).is_err());
        assert!(checked_comment(Some("é".repeat(MAX_COMMENT_CHARS))).is_ok());
        for bad in [
            "a\u{0}b",
            "a\u{202e}b",
            "a\u{2067}b",
            "a\u{200b}b",
            "a\u{200f}b",
            "a\u{feff}b",
        ] {
            assert!(checked_comment(Some(bad.into())).is_err(), "{bad:?}");
        }
        assert!(
            checked_comment(Some("👨\u{200d}👩\u{200d}👧 thanks".into())).is_ok(),
            "joiners stay"
        );
    }
}
